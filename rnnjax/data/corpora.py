"""Text corpora read from a data folder, downloaded with a sha256 check.

The folder is ``$RNNJAX_DATA_DIR`` (default ``./data``). A file that is
missing there is fetched from its public URL into that folder; a file whose
sha256 differs from the pinned one is never used.
"""

import hashlib
import os
import pathlib
import urllib.request

DATA_DIR_VARIABLE = 'RNNJAX_DATA_DIR'

# name -> (path inside the data folder, public URL, sha256)
CORPORA = {
    'tinyshakespeare': (
        'tinyshakespeare/input.txt',
        'https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt',
        '86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed'),
}


class CorpusError(RuntimeError):
  """A corpus file is missing and could not be fetched, or is corrupt."""


def data_dir(path: str | os.PathLike | None = None) -> pathlib.Path:
  """The data folder: ``path`` if given, else ``$RNNJAX_DATA_DIR``, else ./data."""
  return pathlib.Path(path or os.environ.get(DATA_DIR_VARIABLE) or 'data')


def sha256(path: pathlib.Path) -> str:
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return digest.hexdigest()


def corpus_path(name: str, folder: str | os.PathLike | None = None, download: bool = True
                ) -> pathlib.Path:
  """Path of a verified corpus file, downloading it first if it is missing.

  Args:
    name: a key of ``CORPORA``.
    folder: the data folder (see ``data_dir``).
    download: fetch a missing file from its URL.

  Returns:
    the path of a file whose sha256 equals the pinned one.

  Raises:
    ValueError: for an unknown name.
    CorpusError: the file is missing and the download failed (or was not
      allowed), or its sha256 differs; the message says where to put it.
  """
  if name not in CORPORA:
    raise ValueError(f'name: expected one of {sorted(CORPORA)}, got {name!r}')
  relative, url, expected = CORPORA[name]
  path = data_dir(folder) / relative
  where = (f'put the file at {path} (or set {DATA_DIR_VARIABLE} to the folder holding '
           f'{relative}); its source is {url}')
  if not path.exists():
    if not download:
      raise CorpusError(f'{name}: {path} is missing; {where}')
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + '.part')
    try:
      urllib.request.urlretrieve(url, partial)
    except OSError as error:
      partial.unlink(missing_ok=True)
      raise CorpusError(f'{name}: {path} is missing and the download failed ({error}); '
                        f'{where}') from error
    os.replace(partial, path)
  actual = sha256(path)
  if actual != expected:
    raise CorpusError(f'{name}: {path} has sha256 {actual}, expected {expected}: the file is '
                      f'corrupt or another version; {where}')
  return path


def read_text(name: str, folder: str | os.PathLike | None = None, download: bool = True) -> str:
  """The verified corpus as a string (UTF-8). Raises as ``corpus_path``."""
  return corpus_path(name, folder, download).read_text(encoding='utf-8')
