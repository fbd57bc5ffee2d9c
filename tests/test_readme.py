"""The README: a front page of at most 250 lines whose library example runs and prints what
it says, whose two commands are the ones CI and the main job use, and whose links lead to
pages that exist."""

import contextlib
import io
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / 'README.md').read_text()
PRINTS = re.compile(r'#\s*prints:\s?(.*?)\s*$', re.M)

MAIN_JOB = ('python3 -m venv .venv && '
            ".venv/bin/pip install -q -c constraints.txt -e '.[train]' && "
            'RNNJAX_DATA_DIR=${RNNJAX_DATA_DIR:-../shared/data} .venv/bin/python -m launch.sweep '
            '--config=experiments/configs/char_lm.py --workdir=results/char_lm_sweep')
TESTS = ('python3 -m venv .venv && '
         ".venv/bin/pip install -q -c constraints.txt -e '.[test]' && "
         'RNNJAX_DATA_DIR=${RNNJAX_DATA_DIR:-../shared/data} .venv/bin/python -m pytest')


def test_readme_is_a_front_page():
  assert len(README.splitlines()) <= 250
  assert not re.search(r'python -m experiments\.', README)


def test_the_two_commands_are_as_ci_and_the_main_job_run_them():
  commands = re.findall(r'```sh\n(.*?)\n```', README, re.S)
  assert MAIN_JOB in commands
  assert TESTS in commands


def test_library_example_uses_the_top_level_api_and_prints_what_it_says():
  blocks = re.findall(r'^```python\n(.*?)^```', README, re.S | re.M)
  assert len(blocks) == 1
  block, = blocks
  assert len(block.splitlines()) <= 32
  assert 'import rnnjax as rj' in block
  for name in ('rj.elman_layer', 'rj.state_gradients', 'rj.gradient_norm_table'):
    assert name in block
  output = io.StringIO()
  with contextlib.redirect_stdout(output):
    exec(compile(block, 'README.md', 'exec'), {'__name__': 'readme'})
  expected = PRINTS.findall(block)
  assert len(expected) == 5
  assert output.getvalue().splitlines() == expected


def test_links_lead_to_files_of_the_repository():
  links = re.findall(r'\]\(([^)#]+)(?:#[^)]*)?\)', README)
  assert sum(link.startswith('docs/') for link in links) >= 15
  for link in links:
    assert (ROOT / link).exists(), link
