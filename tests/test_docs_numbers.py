"""Every number in a study page's prose is in its own committed results, or quoted from a paper.

A number of docs/studies/*.md (outside code, tables, includes and images) is backed when a
number of the files the page names rounds to it at the digits the page gives (2.72 is backed
by 2.7213; 1,500 by 1500; 7e-4 by 0.000705; 95% by 0.95 or 95). The files a page names: the
results files it includes or links by path (a study's folder, linked as ``results/<study>/``,
whole), the files of the linked studies' folders it names by bare name (``results.md``), and
the configs and modules of experiments/ and rnnjax/ it names (the protocol's numbers). A
results file over ``LARGE`` bytes that the page does not include (a table of every run, a CSV
at full precision) backs only the sentences that name it. A number within ``QUOTE_WINDOW``
characters of a paper's citation in its sentence (an author and a year, "et al.", "Table n",
"section n", "eq. n") is quoted from that paper. The test lists every number that is neither.
A page's own included tables still back any number they hold: a page with a large table
(gradient_norms.md) backs most three-digit fractions, so there a wrong number can pass.
Every published table prints an underflowed ratio as a bound, not 0, and every table a page
includes gives its seed count and, over more than one seed, a spread or an interval.
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


def masked(code: str) -> str:
  """Inline code or a link target as prose keeps it: its names, its digits as '#'."""
  return ' ' + re.sub(r'\d', '#', code) + ' '


def prose(text: str) -> str:
  """The page without its code blocks, include directives, tables and images; inline code and
  link targets keep their names but not their digits (``masked``)."""
  text = re.sub(r'```.*?```', ' ', text, flags=re.S)
  text = re.sub(r'^\s*\|.*$', ' ', text, flags=re.M)  # table rows
  text = re.sub(r'^ {4}.*$', ' ', text, flags=re.M)  # indented (code, equations)
  text = re.sub(r'!\[[^\]]*\]\([^)]*\)', ' ', text)  # images
  text = re.sub(r'\]\(([^)]*)\)', lambda m: ']' + masked(m.group(1)), text)  # link targets
  text = re.sub(r'`([^`]*)`', lambda m: masked(m.group(1)), text)
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
RESULTS_REFERENCE = re.compile(r'(?:\.\./|docs/)results/([\w=.,/-]+)')
FILE_NAME = re.compile(r'`([\w=.,-]+\.(?:md|csv|json))`')
CODE_REFERENCE = re.compile(r'\b((?:experiments|rnnjax)(?:[/.]\w+)+)')
QUOTE_WINDOW = 60  # characters between a quoted number and its citation


def code_file(name: str) -> pathlib.Path | None:
  """The source file of ``experiments/x.py``, ``experiments.x.f``, ``rnnjax.m.f`` or a name
  ``rnnjax`` exports (``rnnjax.omega``: the module ``rnnjax._NAMES`` says defines it)."""
  import rnnjax

  parts = name.removesuffix('.py').replace('/', '.').split('.')
  if parts[0] == 'rnnjax' and len(parts) > 1 and parts[1] in rnnjax._NAMES:
    parts = ['rnnjax', rnnjax._NAMES[parts[1]]]
  for end in range(len(parts), 1, -1):
    path = ROOT.joinpath(*parts[:end]).with_suffix('.py')
    if path.is_file():
      return path
  return None


def named_files(page: pathlib.Path) -> list[pathlib.Path]:
  """The files the page names: each results file it links or includes by path (a study's
  folder, linked as ``results/<study>/``, whole), the files named by their bare name in the
  folders of the studies it links, and the code files it names."""
  text = page.read_text()
  files, folders = set(), set()
  for reference in RESULTS_REFERENCE.findall(text):
    path = RESULTS / reference.rstrip('.,')
    folders.add(RESULTS / reference.split('/')[0].removesuffix('.md'))
    if path.is_dir() and reference.endswith('/'):
      files.update(p for p in path.rglob('*') if p.suffix in ('.md', '.csv', '.json'))
    elif path.is_file() and path.suffix in ('.md', '.csv', '.json'):
      files.add(path)
  for name in FILE_NAME.findall(text):
    files.update(p for folder in folders if folder.is_dir() for p in folder.rglob(name))
  files.update(filter(None, map(code_file, CODE_REFERENCE.findall(text))))
  return sorted(files)


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


def unbacked(text: str, numbers: list[float],
             large: dict[str, list[float]] | None = None) -> list[str]:
  """The numbers of the page's prose neither in ``numbers``, nor in a ``large`` file's numbers
  (keyed by the names that name it) that their own sentence names, nor beside a citation."""
  out = []
  for sentence in sentences(prose(text)):
    citations = [match.span() for match in CITATION.finditer(sentence)]
    named = sorted({x for name, values in (large or {}).items() if name in sentence
                    for x in values})
    for match in NUMBER.finditer(sentence):
      quoted = any(match.start() < end + QUOTE_WINDOW and match.end() > start - QUOTE_WINDOW
                   for start, end in citations)
      if not quoted and not backed(match.group(), numbers) and not backed(match.group(), named):
        out.append(f'{match.group()}: {" ".join(sentence.split())[:160]}')
  return out


def test_unbacked_finds_a_number_missing_from_the_files_and_away_from_a_citation():
  text = ('The runs reach 2.72 bits (Pascanu et al., 2013 report 1.42). Ours end at 3.1 '
          'bits per character, well away from any citation of the paper.')
  assert unbacked(text, [2.7213]) == [
      '3.1: Ours end at 3.1 bits per character, well away from any citation of the paper.']
  far = ('Pascanu et al. (2013) clip at another threshold, and across every setting that this '
         'page sweeps our runs end at 3.1 bits.')
  assert [line.split(':')[0] for line in unbacked(far, [])] == ['3.1']  # 2013 is the citation


def test_a_page_is_backed_by_its_own_studies_and_code_only():
  files = named_files(ROOT / 'docs' / 'studies' / 'main_job.md')
  assert RESULTS / 'char_lm.md' in files and ROOT / 'experiments/configs/char_lm.py' in files
  assert RESULTS / 'ptb_words.md' not in files
  pascanu = named_files(ROOT / 'docs' / 'studies' / 'pascanu.md')  # rnnjax.omega, .clip_pascanu
  assert {ROOT / 'rnnjax/regularizers.py', ROOT / 'rnnjax/clipping.py'} <= set(pascanu)


LARGE = 20_000  # bytes: a file this large that the page does not include (a table of every
# run, a CSV at full precision) backs only a sentence naming it: it would back most numbers


def included(page: pathlib.Path) -> list[pathlib.Path]:
  """The results files the page includes (its ``{include}`` directives)."""
  return [(page.parent / name).resolve()
          for name in re.findall(r'```\{include\} (\S+)', page.read_text())]


def split_by_size(page: pathlib.Path) -> tuple[list[pathlib.Path], list[pathlib.Path]]:
  """The page's named files: (those that back the whole page, the large ones)."""
  includes = set(included(page))
  files = named_files(page)
  small = [f for f in files if f.stat().st_size <= LARGE or f.resolve() in includes
           or not f.is_relative_to(RESULTS)]
  return small, [f for f in files if f not in small]


def test_a_large_file_backs_only_a_sentence_that_names_it():
  large = {'results.md': [0.431]}
  assert unbacked('One run ends at 0.431.', [], large) == ['0.431: One run ends at 0.431.']
  assert unbacked('One run ends at 0.431 (`results.md`).', [], large) == []


@pytest.mark.parametrize('page', STUDIES, ids=[p.stem for p in STUDIES])
def test_every_number_of_a_study_page_is_in_a_results_file_or_cited(page):
  small, large_files = split_by_size(page)
  large: dict[str, list[float]] = {}
  for path in large_files:
    for name in {path.name, str(path.relative_to(ROOT)), str(path.relative_to(RESULTS))}:
      large.setdefault(masked(name).strip(), []).extend(numbers_in([path]))
  missing = unbacked(page.read_text(), numbers_in(small), large)
  assert not missing, '\n'.join(missing)


RATIO_COLUMN = re.compile(r'profile|ratio_k')


def zero_ratios(table: str) -> list[str]:
  """The rows of Markdown tables (a file may hold several, each with its header) whose ratio
  columns (a gradient-norm profile, a ratio at distance k) hold a bare 0: an underflow printed
  as a value."""
  out, header = [], None
  for line in table.splitlines():
    if not line.startswith('|'):
      header = None  # the next table's first row is its header
      continue
    if line.startswith('|---'):
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
  second = '| shape | ratio_k10 |\n|---|---|\n| S1 | 0 |'
  assert zero_ratios(table + '\n\nText.\n\n' + second) == ['profile: 0.061 0', 'ratio_k10: 0']


@pytest.mark.parametrize('path', sorted((ROOT / 'docs' / 'results').rglob('*.md')),
                         ids=lambda p: str(p.relative_to(ROOT / 'docs' / 'results')))
def test_no_published_table_prints_an_underflowed_ratio_as_0(path):
  assert not zero_ratios(path.read_text()), zero_ratios(path.read_text())[:5]


SEEDS = re.compile(r'seed|k of n|one run each', re.I)  # a column, a heading or a rate's n
ONE_SEED = re.compile(r'\(1 seed\(s\)\)|one run each')
SPREAD = re.compile(r'interquartile|IQR|quartile|Wilson|95% CI|standard deviation')


def lacks(table: str) -> str:
  """What a published table lacks: its seed count, or (over more than one seed) a spread or
  an interval; '' when it has both."""
  if not SEEDS.search(table):
    return 'a seed count'
  return '' if ONE_SEED.search(table) or SPREAD.search(table) else 'a spread or an interval'


def test_lacks_finds_a_table_without_seeds_and_one_over_seeds_without_spread():
  rows = '\n\n| rho | loss |\n|---|---|\n| 1.0 | 2.5 |'
  assert lacks('Medians.' + rows) == 'a seed count'
  assert lacks('Medians over 3 seeds.' + rows) == 'a spread or an interval'
  assert lacks('One run a row (1 seed(s)).' + rows) == ''
  assert lacks('Median [IQR] over 3 seeds.' + rows) == ''


@pytest.mark.parametrize('page', STUDIES, ids=lambda p: p.name)
def test_every_table_a_page_includes_gives_its_seeds_and_their_spread(page):
  for table in included(page):
    assert not lacks(table.read_text()), table
