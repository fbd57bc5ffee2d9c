"""The README's Python example runs as written and prints what it says."""

import contextlib
import io
import pathlib
import re


def test_readme_example_runs():
  readme = (pathlib.Path(__file__).parent.parent / 'README.md').read_text()
  blocks = re.findall(r'```python\n(.*?)```', readme, re.S)
  assert blocks
  for block in blocks:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
      exec(compile(block, 'README.md', 'exec'), {})
    expected = re.findall(r'# (\(.*\))$', block, re.M)  # the printed values, as commented
    assert output.getvalue().split('\n')[:len(expected)] == expected
