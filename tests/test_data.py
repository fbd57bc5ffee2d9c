"""Corpora with a sha256 check, and token streams cut for truncated BPTT."""

import io
import re
import socket
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

from rnnjax.data import corpora
from rnnjax.data import text


def test_tinyshakespeare_is_verified(shared_data_dir):
  corpus = corpora.read_text('tinyshakespeare', shared_data_dir, download=False)
  assert len(corpus) == 1_115_394
  assert corpus.startswith('First Citizen:')
  assert len(text.char_vocabulary(corpus)) == 65


def test_missing_corpus_without_download_says_where_to_put_it(tmp_path):
  with pytest.raises(corpora.CorpusError, match=r'is missing; put the file at .*tinyshakespeare/input.txt'):
    corpora.corpus_path('tinyshakespeare', tmp_path, download=False)


def test_failed_download_says_where_to_put_it(tmp_path, monkeypatch):
  def offline(url, timeout):
    raise OSError('network unreachable')
  monkeypatch.setattr(urllib.request, 'urlopen', offline)
  with pytest.raises(corpora.CorpusError,
                     match=r'missing and the download failed \(network unreachable\); put the file at'):
    corpora.corpus_path('tinyshakespeare', tmp_path / 'typo' / 'data')
  assert list(tmp_path.iterdir()) == []  # the folders made for the download are removed again


def test_a_file_or_folder_in_the_wrong_place_is_named(tmp_path):
  (tmp_path / 'tinyshakespeare' / 'input.txt').mkdir(parents=True)
  with pytest.raises(corpora.CorpusError, match=r'tinyshakespeare: .*/tinyshakespeare/input.txt '
                                                r'is not a file; put the file at'):
    corpora.corpus_path('tinyshakespeare', tmp_path)
  (tmp_path / 'afile').write_text('')
  for download in (True, False):
    with pytest.raises(corpora.CorpusError, match=r'tinyshakespeare: .*/afile is a file, where a '
                                                  r'folder holding tinyshakespeare/input.txt'):
      corpora.corpus_path('tinyshakespeare', tmp_path / 'afile', download=download)


def test_download_is_checked(tmp_path, monkeypatch):
  def fake_download(url, timeout):
    assert url.startswith('https://raw.githubusercontent.com/karpathy/char-rnn/')
    return io.BytesIO(b'not shakespeare')
  monkeypatch.setattr(urllib.request, 'urlopen', fake_download)
  with pytest.raises(corpora.CorpusError, match=r'has sha256 [0-9a-f]{64}, expected 86c4e6aa'):
    corpora.corpus_path('tinyshakespeare', tmp_path)


def test_a_server_that_accepts_and_never_answers_times_out(tmp_path, monkeypatch):
  """A download from a server that takes the connection and sends nothing gives up after
  ``timeout`` in one line, instead of waiting for ever."""
  with socket.create_server(('127.0.0.1', 0)) as server:
    url = f'http://127.0.0.1:{server.getsockname()[1]}/corpus.txt'
    monkeypatch.setitem(corpora.CORPORA, 'silent', ('silent/corpus.txt', url, '0' * 64))
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    errors = []
    download = threading.Thread(target=lambda: errors.append(pytest.raises(
        corpora.CorpusError, corpora.corpus_path, 'silent', tmp_path, timeout=0.5)), daemon=True)
    download.start()
    download.join(60)
    assert accepted and not download.is_alive()  # not for ever
  assert re.fullmatch(r'silent: \S+ is missing and the download failed \(timed out\); put the '
                      r'file at .*', str(errors[0].value))


def test_corrupt_corpus_is_rejected(tmp_path):
  path = tmp_path / 'tinyshakespeare' / 'input.txt'
  path.parent.mkdir()
  path.write_text('First Citizen: (truncated)')
  with pytest.raises(corpora.CorpusError, match='the file is corrupt or another version'):
    corpora.read_text('tinyshakespeare', tmp_path)


def test_data_dir_comes_from_the_environment(tmp_path, monkeypatch):
  monkeypatch.setenv('RNNJAX_DATA_DIR', str(tmp_path))
  assert corpora.data_dir() == tmp_path
  with pytest.raises(ValueError, match="name: expected one of .* got 'ptb2'"):
    corpora.corpus_path('ptb2')


def test_stream_windows_cut_and_shift():
  ids = np.arange(23)
  inputs, targets = text.stream_windows(ids, batch_size=2, truncation=5)
  # L = (23 - 1) // 2 = 11 steps per stream, 2 windows of 5.
  assert inputs.shape == targets.shape == (2, 2, 5)
  np.testing.assert_array_equal(inputs[0], [[0, 1, 2, 3, 4], [11, 12, 13, 14, 15]])
  np.testing.assert_array_equal(inputs[1], [[5, 6, 7, 8, 9], [16, 17, 18, 19, 20]])
  np.testing.assert_array_equal(targets, inputs + 1)  # teacher forcing: the next token


@pytest.mark.parametrize('kwargs, message', [
    (dict(batch_size=0, truncation=5), 'batch_size: expected an int >= 1, got 0'),
    (dict(batch_size=2, truncation=0), 'truncation: expected an int tau >= 1, got 0'),
    (dict(batch_size=4, truncation=8), 'fewer than truncation=8'),
])
def test_stream_windows_bad_input(kwargs, message):
  with pytest.raises(ValueError, match=message):
    text.stream_windows(np.arange(23), **kwargs)


def test_encode_decode_and_split():
  vocabulary = text.char_vocabulary('hello world')
  assert vocabulary == ' dehlorw'
  ids = text.encode('hello world', vocabulary)
  assert text.decode(ids, vocabulary) == 'hello world'
  with pytest.raises(ValueError, match=r"text: characters \['!'\] are not in the vocabulary"):
    text.encode('hello!', vocabulary)
  train, held_out = text.split_train_validation(np.arange(100), 0.1)
  np.testing.assert_array_equal(held_out, np.arange(90, 100))
  assert len(train) == 90



def test_the_data_imports_no_model_module():
  """rnnjax.data sits below the models: its modules import only each other and the
  recurrence plumbing (reverse_within_lengths, for digit reversal), the argument checks and
  the extras' check (sentencepiece's, for the BPE tokenizer)."""
  import ast
  import pathlib
  folder = pathlib.Path(corpora.__file__).parent
  imported = set()
  for path in folder.glob('*.py'):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith('rnnjax'):
        imported.update(f'{node.module}.{alias.name}' for alias in node.names)
      elif isinstance(node, ast.Import):
        imported.update(alias.name for alias in node.names if alias.name.startswith('rnnjax'))
  outside = {name for name in imported if not name.startswith('rnnjax.data.')}
  assert outside == {'rnnjax.recurrence', 'rnnjax.checks', 'rnnjax.extras'}, outside
  assert 'rnnjax.data.corpora' in imported  # the walk sees the imports


def test_a_failed_download_whose_folder_another_process_removed_says_the_file_is_missing(
    tmp_path, monkeypatch):
  """Two jobs download the same missing corpus: the other one's failure removes the folder
  this one made too; this one still says what is missing, not the folder's FileNotFoundError."""
  folder = tmp_path / 'no'

  def refuse(url, timeout):
    for made in (folder / 'tinyshakespeare', folder):
      made.rmdir()  # the other job's cleanup, first
    raise urllib.error.URLError('no network')

  monkeypatch.setattr(urllib.request, 'urlopen', refuse)
  with pytest.raises(corpora.CorpusError, match='is missing and the download failed'):
    corpora.corpus_path('tinyshakespeare', folder)
