"""Every number in a study page's prose is in its own committed results, or quoted from a paper.

A number of docs/studies/*.md (outside code, tables, includes, links and math) is backed when a
number of the files the page itself names rounds to it at the digits the page gives (2.72 is
backed by 2.7213; 1,500 by 1500; 7e-4 by 0.000705; 95% by 0.95 or 95). The files a page names:
each study of docs/results it links or includes (``<study>.md`` and its folder: tables, CSV and
JSON) and, for the protocol's numbers, the configs and modules of experiments/ and rnnjax/ it
names. A number within 60 characters of a paper's citation in its sentence (an author and a
year, "et al.", "Table n", "section n", "eq. n") is quoted from that paper. The test lists
every number that is neither.
"""

import json
import math
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUDIES = sorted((ROOT / 'docs' / 'studies').glob('*.md'))
NUMBER = re.compile(r'(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?%?(?![\w])')
CITATION = re.compile(r'et al\.|\b[A-Z][A-Za-z-]+(?: (?:&|and) [A-Z][A-Za-z-]+)?,? \(?(?:19|20)\d\d'
                      r'\b|\bTable \d|\bsection \d|\beq\. \d')


def prose(text: str) -> str:
  """The page without its code blocks, include directives, tables, images, link targets,
  inline code and inline maths."""
  text = re.sub(r'```.*?```', ' ', text, flags=re.S)
  text = re.sub(r'^\s*\|.*$', ' ', text, flags=re.M)  # table rows
  text = re.sub(r'^ {4}.*$', ' ', text, flags=re.M)  # indented (code, equations)
  text = re.sub(r'!\[[^\]]*\]\([^)]*\)', ' ', text)  # images
  text = re.sub(r'\]\([^)]*\)', ']', text)  # link targets
  text = re.sub(r'`[^`]*`', ' ', text)
  return text


def sentences(text: str) -> list[str]:
  return re.split(r'(?<=[.;:])(?<!al\.)\s+(?=[A-Z(])|\n\s*\n', text)


def value(token: str) -> tuple[float, float]:
  """(the number, half a unit of its last digit)."""
  token = token.replace(',', '').rstrip('%')
  mantissa = token.split('e')[0]
  decimals = len(mantissa.split('.')[1]) if '.' in mantissa else 0
  number = float(token)
  exponent = int(token.split('e')[1]) if 'e' in token else 0
  return number, 0.5 * 10.0 ** (exponent - decimals)


RESULTS = ROOT / 'docs' / 'results'
STUDY_REFERENCE = re.compile(r'(?:\.\./|docs/)results/([\w=-]+)')
CODE_REFERENCE = re.compile(r'\b((?:experiments|rnnjax)(?:[/.]\w+)+)')
QUOTE_WINDOW = 60  # characters between a quoted number and its citation


def named_files(page: pathlib.Path) -> list[pathlib.Path]:
  """The results of the studies the page links or includes, and the code files it names."""
  text = page.read_text()
  files = []
  for study in set(STUDY_REFERENCE.findall(text)):
    files += [RESULTS / f'{study}.md'] if (RESULTS / f'{study}.md').exists() else []
    if (RESULTS / study).is_dir():
      files += [p for p in (RESULTS / study).rglob('*') if p.suffix in ('.md', '.csv', '.json')]
  for name in set(CODE_REFERENCE.findall(text)):
    path = name.removesuffix('.py').replace('.', '/')
    files += [ROOT / f for f in (f'{path}.py', f'{path.rsplit("/", 1)[0]}.py')
              if (ROOT / f).is_file()]
  return files


def numbers_in(files: list[pathlib.Path]) -> list[float]:
  found = set()
  for path in files:
    for token in re.findall(r'[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?', path.read_text()):
      found.add(float(token))
  return sorted(found)


def backed(token: str, numbers: list[float]) -> bool:
  number, half = value(token)
  targets = [(number, half)]
  if token.endswith('%'):
    targets.append((number / 100, half / 100))
  return any(any(abs(y - x) <= h * (1 + 1e-9) or abs(abs(y) - abs(x)) <= h * (1 + 1e-9)
                 for y in numbers) for x, h in targets)


def unbacked(text: str, numbers: list[float]) -> list[str]:
  """The numbers of the page's prose neither in ``numbers`` nor beside a citation."""
  out = []
  for sentence in sentences(prose(text)):
    citations = [match.span() for match in CITATION.finditer(sentence)]
    for match in NUMBER.finditer(sentence):
      quoted = any(match.start() < end + QUOTE_WINDOW and match.end() > start - QUOTE_WINDOW
                   for start, end in citations)
      if not quoted and not backed(match.group(), numbers):
        out.append(f'{match.group()}: {" ".join(sentence.split())[:160]}')
  return out


def test_unbacked_finds_a_number_missing_from_the_files_and_away_from_a_citation():
  text = ('The runs reach 2.72 bits (Pascanu et al., 2013 report 1.42). Ours end at 3.1 '
          'bits per character, well away from any citation of the paper.')
  assert unbacked(text, [2.7213]) == [
      '3.1: Ours end at 3.1 bits per character, well away from any citation of the paper.']


def test_a_page_is_backed_by_its_own_studies_and_code_only():
  files = named_files(ROOT / 'docs' / 'studies' / 'main_job.md')
  assert RESULTS / 'char_lm.md' in files and ROOT / 'experiments/configs/char_lm.py' in files
  assert RESULTS / 'ptb_words.md' not in files


@pytest.mark.parametrize('page', STUDIES, ids=[p.stem for p in STUDIES])
def test_every_number_of_a_study_page_is_in_a_results_file_or_cited(page):
  missing = unbacked(page.read_text(), numbers_in(named_files(page)))
  assert not missing, '\n'.join(missing)


RATIO_COLUMN = re.compile(r'profile|ratio_k')


def zero_ratios(table: str) -> list[str]:
  """The rows of a Markdown table whose ratio columns (a gradient-norm profile, a ratio at
  distance k) hold a bare 0: an underflow printed as a value."""
  out, header = [], None
  for line in table.splitlines():
    if not line.startswith('|') or line.startswith('|---'):
      continue
    cells = [cell.strip() for cell in line.strip('|').split('|')]
    if header is None:
      header = cells
      continue
    for name, cell in zip(header, cells):
      if RATIO_COLUMN.search(name) and re.search(r'(?<![\d.<e-])0(?![\d.e])', cell):
        out.append(f'{name}: {cell}')
  return out


def test_zero_ratios_finds_a_bare_0_and_not_a_bound():
  table = '| k | profile |\n|---|---|\n| 1 | 0.5 < 1.2e-38 10 |\n| 2 | 0.061 0 |'
  assert zero_ratios(table) == ['profile: 0.061 0']


@pytest.mark.parametrize('path', sorted((ROOT / 'docs' / 'results').rglob('*.md')),
                         ids=lambda p: str(p.relative_to(ROOT / 'docs' / 'results')))
def test_no_published_table_prints_an_underflowed_ratio_as_0(path):
  assert not zero_ratios(path.read_text()), zero_ratios(path.read_text())[:5]
