"""Reads rnnjax's docstrings as what they are: plain text with Google sections.

The docstrings write norms as |x|, formulas, commands and aligned tables as indented
blocks, and sometimes a word right after an inline literal (a literal ``jax.vmap``
followed by "ped"). reStructuredText reads |x| as a substitution, an indented block
after a paragraph as a block quote or a definition list (and warns where its
indentation varies), and a literal followed by a letter as unterminated. Before
napoleon turns the Google sections into fields, this hook:

- makes every indented block of the free text (outside a section, a bullet item or
  a directive) a literal block, shown as written;
- escapes | outside inline literals;
- ends an inline literal followed by a letter with an escaped space (shown as
  nothing).

Nothing else is changed: whatever else reST cannot read stays an error of the
build (``sphinx-build -W``).
"""

import re

__all__ = ['plain_text', 'setup']

# napoleon's Google section headers (sphinx.ext.napoleon's documentation), longest first.
_SECTIONS = sorted((
    'Args', 'Arguments', 'Attention', 'Attributes', 'Caution', 'Danger', 'Error', 'Example',
    'Examples', 'Hint', 'Important', 'Keyword Args', 'Keyword Arguments', 'Methods', 'Note',
    'Notes', 'Other Parameters', 'Parameters', 'Receive', 'Receives', 'Return', 'Returns',
    'Raise', 'Raises', 'References', 'See Also', 'Tip', 'Todo', 'Warning', 'Warnings',
    'Warns', 'Yield', 'Yields'), key=len, reverse=True)
_SECTION = re.compile(r'^(\s*)(%s):\s*$' % '|'.join(map(re.escape, _SECTIONS)), re.I)
_BULLET = re.compile(r'^(\s*)([-*+]|\d+[.)])\s+')
_LITERAL = re.compile(r'(``.+?``)')


def _indent(line: str) -> int:
  return len(line) - len(line.lstrip())


def _escape(line: str) -> str:
  """The line with | escaped outside inline literals, and a literal glued to a word ended."""
  parts = _LITERAL.split(line)
  for i in range(0, len(parts), 2):
    parts[i] = parts[i].replace('|', r'\|')
  for i in range(1, len(parts), 2):
    if i + 1 < len(parts) and re.match(r'\w', parts[i + 1]):
      parts[i] += '\\ '
  return ''.join(parts)


def plain_text(lines: list[str]) -> list[str]:
  """The docstring's lines (as autodoc gives them: dedented) as reST that says the same."""
  out = []
  section = None  # indentation of the Google section header whose body this is
  nested = None  # indentation that continues a bullet item or a directive
  i = 0
  while i < len(lines):
    line = lines[i]
    if not line.strip():
      out.append(line)
      i += 1
      continue
    indent = _indent(line)
    if section is not None and indent > section:
      out.append(_escape(line))
      i += 1
      continue
    section = None
    if nested is not None and indent >= nested:
      out.append(_escape(line))
      i += 1
      continue
    nested = None
    header = _SECTION.match(line)
    if header:
      section = indent
      out.append(line)
    elif indent == 0:
      bullet = _BULLET.match(line)
      if bullet:
        nested = len(bullet.group(0))
      elif line.startswith('.. '):
        nested = 1
      out.append(_escape(line))
    else:  # an indented block of free text: shown as written
      block = []
      while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > 0):
        block.append(lines[i])
        i += 1
      while block and not block[-1].strip():
        block.pop()
      previous = next((l for l in reversed(out) if l.strip()), '')
      if previous.rstrip().endswith('::'):
        out.extend([''] + block + [''])
      else:
        out.extend(['', '::', ''] + block + [''])
      continue
    i += 1
  return out


def _process(app, what, name, obj, options, lines):
  lines[:] = plain_text(lines)


def setup(app):
  # Before napoleon (priority 500): the Google sections are still as written.
  app.connect('autodoc-process-docstring', _process, priority=400)
  return {'parallel_read_safe': True, 'parallel_write_safe': True}
