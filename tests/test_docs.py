"""The documentation: every Python example of its pages runs and prints what it says, and
the built site opens in a real headless browser without errors.

Examples: each page's ```python blocks run in order in one namespace, in a fresh working
directory that is on ``sys.path``. A block whose first line is ``# file: PATH`` is a file
listing: it is written to PATH there (for later blocks to import), not run. ``# prints: TEXT``
comments give, in order, every line a block prints; a block with none may print anything.

The browser: Debian's chromium (``apt-get install chromium``; ``.ci/run`` installs it),
driven by playwright's Python client (its own driver, no browser download), offline.
"""

import contextlib
import io
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / 'docs'
BUILD = DOCS / '_build' / 'html'
PAGES = sorted(p for p in DOCS.rglob('*.md') if '_build' not in p.parts)
BLOCK = re.compile(r'^```python\n(.*?)^```\s*$', re.S | re.M)
PRINTS = re.compile(r'#\s*prints:\s?(.*?)\s*$', re.M)
FILE = re.compile(r'#\s*file:\s*(\S+)\s*\n')
CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')


def blocks(page: pathlib.Path) -> list[str]:
  return BLOCK.findall(page.read_text())


def run_page(page: pathlib.Path, workdir: pathlib.Path) -> None:
  """Runs a page's blocks in order in one namespace; checks each block's printed lines."""
  namespace = {'__name__': f'docs_{page.stem}'}
  before = set(sys.modules)
  cwd = os.getcwd()
  sys.path.insert(0, str(workdir))
  os.chdir(workdir)
  try:
    for number, block in enumerate(blocks(page), 1):
      listing = FILE.match(block)
      if listing:
        path = workdir / listing.group(1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block[listing.end():])
        continue
      output = io.StringIO()
      with contextlib.redirect_stdout(output):
        exec(compile(block, f'{page.name} block {number}', 'exec'), namespace)
      expected = PRINTS.findall(block)
      if expected:
        assert output.getvalue().splitlines() == expected, (
            f'{page.name} block {number} printed other lines than its "# prints:" comments')
  finally:
    os.chdir(cwd)
    sys.path.remove(str(workdir))
    for name in set(sys.modules) - before:  # the page's own modules (written to workdir)
      if getattr(sys.modules[name], '__file__', None) and str(workdir) in sys.modules[name].__file__:
        del sys.modules[name]


def test_there_are_pages_with_examples_and_expected_output():
  assert len(PAGES) >= 20
  examples = [block for page in PAGES for block in blocks(page)]
  assert len(examples) >= 20
  assert sum(len(PRINTS.findall(block)) for block in examples) >= 30


def test_no_page_documents_a_command_that_is_gone():
  """Experiments run through launch.run / launch.sweep (rnnjax-run / rnnjax-sweep) alone."""
  for page in PAGES + [ROOT / 'README.md']:
    text = page.read_text()
    assert not re.search(r'python -m experiments\.', text), page
    assert not re.search(r'--(partition|time|cpus_per_task|nodes|tasks_per_node)=', text), page


@pytest.mark.parametrize('page', [
    pytest.param(p, id=str(p.relative_to(DOCS))) for p in PAGES if blocks(p)])
def test_page_examples_run_and_print_what_they_say(page, tmp_path, monkeypatch):
  monkeypatch.setenv('RNNJAX_COMPILATION_CACHE', '')
  run_page(page, tmp_path)


def test_a_wrong_printed_line_fails(tmp_path):
  page = tmp_path / 'page.md'
  page.write_text('```python\nprint(1 + 1)  # prints: 3\n```\n')
  with pytest.raises(AssertionError, match='printed other lines'):
    run_page(page, tmp_path)
  page.write_text('```python\n# file: pkg/mod.py\nVALUE = 7\n```\n\n'
                  '```python\nfrom pkg import mod\nprint(mod.VALUE)  # prints: 7\n```\n')
  run_page(page, tmp_path)
  assert (tmp_path / 'pkg' / 'mod.py').read_text() == 'VALUE = 7\n'


def build_docs() -> None:
  """Builds the site as CI does: warnings are errors."""
  subprocess.run([sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b', 'html',
                  str(DOCS), str(BUILD)], check=True, cwd=ROOT)


@pytest.fixture(scope='module')
def site():
  if not (BUILD / 'index.html').exists() or not (BUILD / 'api.html').exists():
    build_docs()
  return BUILD


def open_in_chromium(path: pathlib.Path, profile: pathlib.Path) -> tuple[str, str, list[str]]:
  """The page's title, its text, and its console errors, script errors and failed requests."""
  from playwright.sync_api import sync_playwright
  problems = []
  with sync_playwright() as playwright:
    browser = playwright.chromium.launch_persistent_context(  # a fresh --user-data-dir
        profile, executable_path=CHROMIUM, headless=True,
        args=['--no-sandbox', '--disable-gpu', '--disable-background-networking',
              '--disable-component-update', '--disable-sync', '--no-first-run'])
    try:
      tab = browser.new_page()
      tab.on('console', lambda message: problems.append(f'console {message.type}: {message.text}')
             if message.type == 'error' else None)
      tab.on('pageerror', lambda error: problems.append(f'page error: {error}'))
      tab.on('requestfailed', lambda request: problems.append(
          f'request failed: {request.url} {request.failure}'))
      tab.goto(path.as_uri(), wait_until='load')
      tab.wait_for_load_state('networkidle')
      return tab.title(), tab.inner_text('body'), problems
    finally:
      browser.close()


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason='no chromium (apt-get install chromium; CI has it)')


@needs_chromium
@pytest.mark.parametrize('page, names', [
    ('index.html', ['rnnjax', 'elman_layer', 'state_gradients', 'gradient_norm_table',
                    'elman_deer']),
    ('api.html', ['elman_layer', 'state_gradients', 'gradient_norm_table',
                  'lyapunov_spectrum', 'elman_deer']),
])
def test_built_pages_open_in_chromium_without_errors(site, page, names, tmp_path):
  title, text, problems = open_in_chromium(site / page, tmp_path / 'profile')
  assert problems == []
  assert 'rnnjax' in title
  for name in names:
    assert name in text, f'{name} is not on {page}'


@needs_chromium
def test_chromium_reports_a_script_error_and_a_missing_file(tmp_path):
  page = tmp_path / 'broken.html'
  page.write_text('<html><head><title>broken</title><link rel="stylesheet" href="gone.css">'
                  '</head><body>text<script>console.error("logged"); undefined_name();'
                  '</script></body></html>')
  title, text, problems = open_in_chromium(page, tmp_path / 'profile')
  assert (title, text) == ('broken', 'text')
  assert any(p.startswith('console error: logged') for p in problems), problems
  assert any(p.startswith('page error:') and 'undefined_name' in p for p in problems), problems
  assert any(p.startswith('request failed:') and 'gone.css' in p for p in problems), problems


@pytest.mark.slow
def test_the_harness_page_sweeps_its_own_experiment_with_the_installed_command(tmp_path):
  """The page's experiment module and config file, swept by ``rnnjax-sweep`` as the page says
  (with fewer steps), from the folder that holds them."""
  page = DOCS / 'harness.md'
  command = 'rnnjax-sweep --config=my_config.py --workdir=results/adding_sweep'
  assert command in page.read_text()
  for block in blocks(page):
    listing = FILE.match(block)
    if listing:
      path = tmp_path / listing.group(1)
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(block[listing.end():])
  script = pathlib.Path(sys.executable).parent / 'rnnjax-sweep'
  assert script.exists(), 'pip install -e . installs the rnnjax-sweep command'
  environment = dict(os.environ, RNNJAX_COMPILATION_CACHE='', PYTHONPATH='')
  done = subprocess.run([str(script), *command.split()[1:], '--config.steps=20'], cwd=tmp_path,
                        env=environment, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  sweep = tmp_path / 'results' / 'adding_sweep'
  rows = [line for line in (sweep / 'results.md').read_text().splitlines()
          if line.startswith('| ') and 'finished' in line]
  assert len(rows) == 6
  assert len((sweep / 'results.csv').read_text().splitlines()) == 7
  # its probe gives every run a gradient-norm profile, drawn as its plots say
  import csv
  with open(sweep / 'results.csv') as table:
    first = [float(row['first_profile_k1']) for row in csv.DictReader(table)]
  assert len(first) == 6 and all(0 < ratio < 10 for ratio in first)
  assert (sweep / 'gradient_profile.png').stat().st_size > 10_000


def test_plain_text_docstrings_become_the_rest_that_says_the_same():
  sys.path.insert(0, str(DOCS / '_ext'))
  try:
    import plain_docstrings
  finally:
    sys.path.remove(str(DOCS / '_ext'))
  lines = ['The norm |x| of ``a|b``, a ``jax.vmap``ped step:',
           '  loss = |g| * 2',
           '     (indented further)',
           'After it.',
           '- a bullet',
           '  continued',
           '',
           'Args:',
           '  x: |x| in the Args',
           '    continued.']
  assert plain_docstrings.plain_text(lines) == [
      r'The norm \|x\| of ``a|b``, a ``jax.vmap``\ ped step:',
      '', '::', '',
      '  loss = |g| * 2',
      '     (indented further)',
      '',
      'After it.',
      '- a bullet',
      '  continued',
      '',
      'Args:',
      r'  x: \|x\| in the Args',
      '    continued.']


def test_the_api_reference_names_every_public_name():
  """Every name of ``rnnjax.__all__`` and every module of ``rnnjax.train`` has its entry."""
  import pkgutil
  import types

  import rnnjax
  import rnnjax.train
  top, modules, train = ((DOCS / name).read_text()
                         for name in ('api.md', 'api_modules.md', 'api_train.md'))
  for name in rnnjax.__all__:
    if isinstance(getattr(rnnjax, name), types.ModuleType):
      assert f'.. automodule:: rnnjax.{name}\n' in modules, name
    elif name == '__version__':
      assert '.. py:data:: rnnjax.__version__' in top
    else:
      assert f'.. autofunction:: rnnjax.{name}\n' in top, name
  for module in pkgutil.iter_modules(rnnjax.train.__path__):
    assert f'.. automodule:: rnnjax.train.{module.name}\n' in train, module.name
