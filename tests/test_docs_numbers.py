"""Every number in a study page's prose is in a committed results file, or quoted from a paper.

A number of docs/studies/*.md (outside code, tables, includes, links and math) is backed when a
number of docs/results (its Markdown tables, CSV files and JSON) rounds to it at the digits the
page gives (2.72 is backed by 2.7213; 1,500 by 1500; 7e-4 by 0.000705; 95% by 0.95 or 95), or
when its sentence cites a paper (an author and a year, "et al." or "Table n" of a paper). The
test lists every number that is neither.
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


def results_numbers() -> list[float]:
  found = set()
  for path in (ROOT / 'docs' / 'results').rglob('*'):
    if path.suffix in ('.md', '.csv', '.json'):
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


def unbacked(page: pathlib.Path, numbers: list[float]) -> list[str]:
  out = []
  for sentence in sentences(prose(page.read_text())):
    if CITATION.search(sentence):
      continue
    for token in NUMBER.findall(sentence):
      if not backed(token, numbers):
        out.append(f'{token}: {" ".join(sentence.split())[:160]}')
  return out


@pytest.mark.parametrize('page', STUDIES, ids=[p.stem for p in STUDIES])
def test_every_number_of_a_study_page_is_in_a_results_file_or_cited(page):
  missing = unbacked(page, results_numbers())
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
