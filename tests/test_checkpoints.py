"""Checkpoints under real faults: a flipped bit in an array chunk, a truncated file, a file
the file system refuses (read without root's capabilities), too many open files, a full
disk, a missing record, and 50 random byte flips. Each outcome is asserted by value."""

import errno
import hashlib
import json
import os
import pathlib
import pickle
import random
import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from rnnjax.train import checkpoints


def state(seed: int, size: int = 16):
  """A small training state: params with an embedding of 2 KiB (above OCDBT's 1 KiB of
  values inlined in its checksummed b-tree nodes, so it lies in a data file of its own),
  Adam's state of them (NamedTuples in a tuple), and a step."""
  rng = np.random.default_rng(seed)
  params = {'embedding': rng.normal(size=(size, 32)).astype(np.float32),
            'bias': rng.normal(size=4).astype(np.float32)}
  opt_state = optax.adam(1e-3).init(params)
  opt_state = (opt_state[0]._replace(count=np.int32(seed),
                                     mu=jax.tree_util.tree_map(lambda x: x * 0.5, params)),
               opt_state[1])
  return {'params': params, 'opt_state': jax.tree_util.tree_map(np.asarray, opt_state),
          'step': np.int32(seed)}


def target(tree):
  here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  return jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype, sharding=here), tree)


def assert_bit_for_bit(got, expected):
  got_leaves, structure = jax.tree_util.tree_flatten(got)
  expected_leaves, expected_structure = jax.tree_util.tree_flatten(expected)
  assert structure == expected_structure
  for a, b in zip(got_leaves, expected_leaves):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def saved_run(folder: pathlib.Path, steps=(10, 20)) -> pathlib.Path:
  """A run folder with checkpoints of ``state(step)`` at ``steps``."""
  folder.mkdir(parents=True, exist_ok=True)
  manager = checkpoints.manager(folder)
  for step in steps:
    assert checkpoints.save(manager, step, state(step))
  manager.close()
  return folder


def data_file(folder: pathlib.Path, step: int) -> pathlib.Path:
  """The OCDBT data file that holds the embedding of a step (its largest file)."""
  files = (folder / 'checkpoint' / str(step) / 'state').glob('ocdbt.process_*/d/*')
  return max(files, key=lambda path: path.stat().st_size)


def orbax_alone(folder: pathlib.Path, step: int):
  """The state as orbax restores it, without the record."""
  return ocp.StandardCheckpointer().restore(
      (folder / 'checkpoint' / str(step) / 'state').absolute(), target(state(step)))


def test_save_records_what_was_saved_and_restore_returns_it(tmp_path):
  folder = saved_run(tmp_path / 'run')
  assert checkpoints.saved_steps(folder) == [10, 20]
  record = json.loads((folder / 'checkpoint' / '20' / 'checksum' / 'metadata').read_text())
  embedding = state(20)['params']['embedding']
  assert record['leaves']['params.embedding'] == {
      'dtype': 'float32', 'shape': [16, 32],
      'sha256': hashlib.sha256(b'float32|[16, 32]|' + embedding.tobytes()).hexdigest()}
  assert sorted(record['leaves']) == [
      'opt_state.0.count', 'opt_state.0.mu.bias', 'opt_state.0.mu.embedding',
      'opt_state.0.nu.bias', 'opt_state.0.nu.embedding', 'params.bias', 'params.embedding', 'step']
  assert_bit_for_bit(checkpoints.restore(folder, 10, target(state(0))), state(10))
  assert_bit_for_bit(checkpoints.restore(folder, 20, target(state(0))), state(20))
  manager = checkpoints.manager(folder)
  assert not checkpoints.save(manager, 20, state(20))  # the same values: kept, nothing written
  assert checkpoints.save(manager, 30, state(30))
  manager.close()
  assert checkpoints.saved_steps(folder) == [20, 30]  # the last two kept


def test_a_step_saved_again_with_other_values_moves_the_old_one_aside(tmp_path):
  folder = saved_run(tmp_path / 'run')
  manager = checkpoints.manager(folder)
  assert checkpoints.save(manager, 20, state(21))
  manager.close()
  assert checkpoints.saved_steps(folder) == [10, 20]
  assert_bit_for_bit(checkpoints.restore(folder, 20, target(state(0))), state(21))
  aside = folder / 'checkpoint' / '20.superseded'
  assert (aside / 'checksum' / 'metadata').exists()  # moved, not deleted


def test_a_manager_whose_steps_were_moved_aside_elsewhere_keeps_the_folders_steps(tmp_path):
  """A manager reloads its steps only when they are not the folder's: here step 20 was moved
  aside behind its back (as a group's resume moves an unused step), and its save of 30 keeps
  10 (without the reload it would delete 10 and count the missing 20 as kept)."""
  folder = tmp_path / 'run'
  folder.mkdir()
  manager = checkpoints.manager(folder)
  for step in (10, 20):
    assert checkpoints.save(manager, step, state(step))
  checkpoints._move_aside(folder, 20, 'unused')
  assert checkpoints.save(manager, 30, state(30))
  manager.close()
  assert checkpoints.saved_steps(folder) == [10, 30]


def test_a_save_logs_orbaxs_info_lines_only_when_debugging_and_keeps_its_threads(tmp_path):
  """At absl's verbosity INFO (a worker's default, which shows no library's INFO) orbax's
  INFO records of a save are not made, and the verbosity is INFO again after it; at DEBUG they
  are. Saves after the first start no thread of ``to_thread`` anew."""
  import logging
  import threading
  from absl import logging as absl_logging
  made = []
  handler = logging.Handler()
  handler.emit = made.append
  logging.getLogger('absl').addHandler(handler)
  before = absl_logging.get_verbosity()
  folder = tmp_path / 'run'
  folder.mkdir()
  manager = checkpoints.manager(folder)
  try:
    # first: the manager's own start (a thread that cleans up temporary folders and logs so)
    assert checkpoints.save(manager, 0, state(0))
    for verbosity, steps in ((absl_logging.INFO, (1, 2, 3)), (absl_logging.DEBUG, (4,))):
      absl_logging.set_verbosity(verbosity)
      del made[:]
      for step in steps:
        threads = {thread.ident for thread in threading.enumerate()}
        assert checkpoints.save(manager, step, state(step))
      assert absl_logging.get_verbosity() == verbosity
      orbax_info = [r for r in made if r.levelno == logging.INFO and 'orbax' in r.pathname]
      assert bool(orbax_info) == (verbosity == absl_logging.DEBUG), orbax_info[:3]
      new = {t.name for t in threading.enumerate() if t.ident not in threads}
      assert not {name for name in new if name.startswith('asyncio_')}, new
  finally:
    manager.close()
    absl_logging.set_verbosity(before)
    logging.getLogger('absl').removeHandler(handler)


def test_a_flipped_bit_in_an_array_chunk_falls_back_to_the_older_step(tmp_path, caplog):
  folder = saved_run(tmp_path / 'run')
  path = data_file(folder, 20)
  original = path.read_bytes()
  for position in range(0, len(original), 64):  # a bit of the embedding's chunk whose flip
    flipped = bytearray(original)               # zstd does not notice
    flipped[position] ^= 0x04
    path.write_bytes(bytes(flipped))
    try:
      checkpoints.restore(folder, 20, target(state(0)))
    except checkpoints.Damaged as error:
      found = error
      if error.reason == 'checksum' and 'params.embedding' in str(error):
        break
  else:
    pytest.fail('no flipped bit of the data file gave other values of the embedding')
  assert found.step == 20 and str(found) == (
      f'{folder}: the checkpoint of step 20 is damaged: 1 of its 8 arrays differ from the '
      'checksum recorded when it was saved (params.embedding)')
  silent = orbax_alone(folder, 20)  # orbax alone: other values of that array, no error
  assert [jax.tree_util.keystr(path) for (path, got), saved in zip(
      jax.tree_util.tree_flatten_with_path(silent)[0], jax.tree_util.tree_leaves(state(20)))
          if not np.array_equal(got, saved)] == ["['params']['embedding']"]

  with caplog.at_level('WARNING'):
    step, states = checkpoints.restore_group([folder], target(state(0)))
  assert step == 10 and len(states) == 1
  assert_bit_for_bit(states[0], state(10))
  assert f'{folder}: the checkpoint of step 20 is damaged: 1 of its 8 arrays differ' in caplog.text
  assert checkpoints.saved_steps(folder) == [10]
  assert (folder / 'checkpoint' / '20.damaged' / path.relative_to(
      folder / 'checkpoint' / '20')).read_bytes() == bytes(flipped)  # kept, not deleted


def test_a_truncated_file_is_damage_of_its_own_kind(tmp_path, caplog, capfd):
  folder = saved_run(tmp_path / 'run')
  path = data_file(folder, 20)
  path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
  with pytest.raises(checkpoints.Damaged) as raised:
    checkpoints.restore(folder, 20, target(state(0)))
  message = str(raised.value)
  assert raised.value.reason == 'undecodable' and '\n' not in message
  assert re.fullmatch(  # the first of the two embeddings in the file that TensorStore read
      re.escape(f'{folder}: the checkpoint of step 20 is damaged: '
                f'{folder / "checkpoint" / "20" / "state"} cannot be decoded (reading ')
      + r'(params|opt_state\.0\.mu)\.embedding/0\.0\): OUT_OF_RANGE: Requested byte range '
      r'\[\d+, \d+\) is not valid for value of size \d+', message), message
  with caplog.at_level('WARNING'):
    step, states = checkpoints.restore_group([folder], target(state(0)))
  assert step == 10
  assert_bit_for_bit(states[0], state(10))
  assert 'OUT_OF_RANGE' in caplog.text and (folder / 'checkpoint' / '20.damaged').is_dir()
  error = capfd.readouterr().err
  assert 'Traceback' not in error and 'tensorstore_spec' not in error, error


def test_a_group_resumes_from_the_newest_step_every_run_can_verify(tmp_path, caplog):
  good = saved_run(tmp_path / 'good', steps=(10, 20, 30))  # keeps 20 and 30
  bad = saved_run(tmp_path / 'bad', steps=(10, 20, 30))
  shutil.rmtree(bad / 'checkpoint' / '30' / 'checksum')  # a step without its record
  with pytest.raises(checkpoints.Damaged) as raised:
    checkpoints.restore(bad, 30, target(state(0)))
  assert raised.value.reason == 'unverified'
  with caplog.at_level('WARNING'):
    step, states = checkpoints.restore_group([good, bad], target(state(0)))
  assert step == 20 and len(states) == 2
  for restored in states:
    assert_bit_for_bit(restored, state(20))
  assert f'{bad}: the checkpoint of step 30 has no checksum record' in caplog.text
  assert checkpoints.saved_steps(good) == checkpoints.saved_steps(bad) == [20]
  assert (bad / 'checkpoint' / '30.damaged').is_dir()
  assert (good / 'checkpoint' / '30.unused').is_dir()
  manager = checkpoints.manager(good)  # the group goes on from step 20 and saves step 30 again
  assert checkpoints.save(manager, 30, state(30))
  manager.close()
  assert checkpoints.saved_steps(good) == [20, 30]


def test_a_state_of_another_structure_is_refused_and_nothing_moved(tmp_path):
  folder = saved_run(tmp_path / 'run')
  with pytest.raises(ValueError) as raised:
    checkpoints.restore_group([folder], target(state(0, size=8)))
  assert str(raised.value) == (
      f'target: {folder}: the checkpoint of step 20 holds a state of another structure: '
      "opt_state.0.mu.embedding (saved ('float32', [16, 32]), expected ('float32', [8, 32])), "
      "opt_state.0.nu.embedding (saved ('float32', [16, 32]), expected ('float32', [8, 32])), "
      "params.embedding (saved ('float32', [16, 32]), expected ('float32', [8, 32]))")
  assert checkpoints.saved_steps(folder) == [10, 20]


RESTORE_GROUP = """
import json, os, pathlib, pickle, resource, sys
import jax
from rnnjax.train import checkpoints
folder, pickled, mode = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(pickled, 'rb') as f:
  tree = pickle.load(f)
here = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
target = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=here),
                                tree)

def attempt():
  try:
    return {'step': checkpoints.restore_group([folder], target)[0]}
  except checkpoints.CheckpointError as error:
    return {'kind': type(error).__name__, 'errno': getattr(error, 'errno', None),
            'message': str(error),
            'path': str(error.path)}

if mode == 'emfile':  # every descriptor taken, then 1, 2, ... freed before each restore
  attempt()  # loads every module the restore needs
  resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
  held, results = [], []
  try:
    while True:
      held.append(os.open(os.devnull, os.O_RDONLY))
  except OSError:
    pass
  for _ in range(16):
    results.append(attempt())
    os.close(held.pop())
  for fd in held:
    os.close(fd)
  print(json.dumps(results))
else:
  print(json.dumps(attempt()))
"""


def restore_group_elsewhere(folder: pathlib.Path, mode: str, without_root_reads: bool) -> dict:
  """``restore_group`` in a child process (its result as JSON); ``without_root_reads``: with
  root's capabilities to read any file (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) dropped, so
  that file modes apply to it as to any user."""
  pickled = folder.parent / 'state.pickle'
  pickled.write_bytes(pickle.dumps(state(0)))
  command = [sys.executable, '-c', RESTORE_GROUP, str(folder), str(pickled), mode]
  if without_root_reads and os.geteuid() == 0:
    if not shutil.which('setpriv'):
      pytest.skip('no setpriv to drop root capabilities with')
    caps = '-dac_override,-dac_read_search'
    command = ['setpriv', f'--bounding-set={caps}', f'--inh-caps={caps}'] + command
  done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
  assert done.returncode == 0, done.stderr[-3000:]
  return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_file_without_read_permission_stops_and_deletes_nothing(tmp_path):
  folder = saved_run(tmp_path / 'run')
  path = data_file(folder, 20)
  before = path.read_bytes()
  path.chmod(0)
  result = restore_group_elsewhere(folder, 'read', without_root_reads=True)
  assert result == {
      'kind': 'StorageError', 'errno': errno.EACCES, 'path': str(path),
      'message': f'{path}: cannot read the checkpoint of step 20: Permission denied (EACCES); '
                 'nothing was deleted'}
  path.chmod(0o644)
  assert path.read_bytes() == before and checkpoints.saved_steps(folder) == [10, 20]
  assert sorted(p.name for p in (folder / 'checkpoint').iterdir()) == ['10', '20']
  step, states = checkpoints.restore_group([folder], target(state(0)))
  assert step == 20
  assert_bit_for_bit(states[0], state(20))


def test_too_many_open_files_stops_and_names_the_cause(tmp_path):
  folder = saved_run(tmp_path / 'run')
  results = restore_group_elsewhere(folder, 'emfile', without_root_reads=False)
  assert results[0]['kind'] == 'StorageError' and results[-1] == {'step': 20}, results
  for result in results:  # wherever the restore ran out of descriptors: one line, EMFILE
    if result != {'step': 20}:
      assert result['kind'] == 'StorageError' and result['errno'] == errno.EMFILE, result
      assert result['message'].startswith(f"{result['path']}: cannot ")
      assert result['message'].endswith('Too many open files (EMFILE); nothing was deleted')
      assert result['path'].startswith(str(folder / 'checkpoint'))
  assert checkpoints.saved_steps(folder) == [10, 20]


def test_a_full_disk_is_a_storage_error_and_the_older_step_stays(tmp_path, tmpfs_disk):
  folder = saved_run(tmpfs_disk('256k') / 'run', steps=(10,))
  manager = checkpoints.manager(folder)
  with pytest.raises(checkpoints.StorageError) as raised:
    checkpoints.save(manager, 20, state(20, size=4096))  # 512 KiB of embedding
  manager.close()
  assert raised.value.errno == errno.ENOSPC and '\n' not in str(raised.value)
  assert str(raised.value).endswith(
      'cannot write the checkpoint of step 20: No space left on device (ENOSPC); nothing was '
      'deleted')
  assert checkpoints.saved_steps(folder) == [10]
  step, states = checkpoints.restore_group([folder], target(state(0)))
  assert step == 10
  assert_bit_for_bit(states[0], state(10))


def write_ended_run(folder: pathlib.Path) -> pathlib.Path:
  saved_run(folder)
  (folder / 'config.json').write_text(json.dumps({'seed': 3}))
  (folder / 'summary.json').write_text(json.dumps({'status': 'finished'}))
  return folder


def test_final_params_of_an_ended_run_are_verified(tmp_path, capfd):
  folder = write_ended_run(tmp_path / 'run')
  config, params = checkpoints.final_params(folder)
  assert config == {'seed': 3}
  assert_bit_for_bit(params, state(20)['params'])
  path = data_file(folder, 20)
  path.write_bytes(path.read_bytes()[:100])
  with pytest.raises(checkpoints.Damaged) as raised:
    checkpoints.final_params(folder)
  message = str(raised.value)
  assert '\n' not in message and raised.value.reason == 'undecodable'
  assert message.startswith(f'{folder}: the checkpoint of step 20 is damaged: ')
  assert message.endswith('; it holds the final params of the run: train the run again with '
                          '--overwrite')
  assert checkpoints.saved_steps(folder) == [10, 20]  # a read moves nothing
  error = capfd.readouterr().err
  assert 'Traceback' not in error and 'tensorstore_spec' not in error, error
  (folder / 'summary.json').unlink()
  with pytest.raises(FileNotFoundError, match='holds no ended run'):
    checkpoints.final_params(folder)


def test_50_random_byte_flips_give_the_saved_values_or_damage(tmp_path):
  folder = saved_run(tmp_path / 'run', steps=(20,))
  files = sorted(p for p in (folder / 'checkpoint' / '20').rglob('*') if p.is_file())
  sizes = [p.stat().st_size for p in files]
  rng = random.Random(0)
  outcomes = {}
  for _ in range(50):
    offset = rng.randrange(sum(sizes))  # every byte of the checkpoint equally likely
    index = 0
    while offset >= sizes[index]:
      offset, index = offset - sizes[index], index + 1
    path, original = files[index], files[index].read_bytes()
    flipped = bytearray(original)
    flipped[offset] ^= rng.randrange(1, 256)
    path.write_bytes(bytes(flipped))
    try:
      restored = checkpoints.restore(folder, 20, target(state(0)))
      assert_bit_for_bit(restored, state(20))
      outcome = 'same values'
    except checkpoints.Damaged as error:
      assert '\n' not in str(error)
      outcome = f'damaged ({error.reason})'
    finally:
      path.write_bytes(original)
    outcomes[outcome] = outcomes.get(outcome, 0) + 1
  assert sum(outcomes.values()) == 50
  assert outcomes.get('damaged (checksum)', 0) >= 1, outcomes  # flips orbax reads silently
  assert_bit_for_bit(checkpoints.restore(folder, 20, target(state(0))), state(20))


SAVE_FOREVER = """
import pathlib, sys
sys.path.insert(0, sys.argv[3])
from rnnjax.train import checkpoints
from test_checkpoints import state
manager = checkpoints.manager(pathlib.Path(sys.argv[1]))
step = int(sys.argv[2])
print('ready', flush=True)
while True:
  checkpoints.save(manager, step, state(step, size=512))
  print('saved', step, flush=True)
  step += 1
"""


def test_a_save_killed_at_any_moment_leaves_steps_with_their_record(tmp_path):
  folder = tmp_path / 'run'
  folder.mkdir()
  rng = random.Random(0)
  start = 1
  for _ in range(3):
    child = subprocess.Popen(
        [sys.executable, '-c', SAVE_FOREVER, str(folder), str(start),
         str(pathlib.Path(__file__).parent)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, 'JAX_PLATFORMS': 'cpu'})
    assert child.stdout.readline().strip() == 'ready'
    assert child.stdout.readline().strip() == f'saved {start}'
    try:  # killed within one of the next saves (each about 0.1 s)
      child.wait(timeout=rng.uniform(0.05, 0.5))
    except subprocess.TimeoutExpired:
      child.kill()
    child.wait()
    assert child.returncode == -9
    steps = checkpoints.saved_steps(folder)
    assert steps[-1] >= start, steps
    for step in steps:  # each finalised step: its values bit for bit, or damaged (never others)
      try:
        assert_bit_for_bit(checkpoints.restore(folder, step, target(state(0, size=512))),
                           state(step, size=512))
      except checkpoints.Damaged:
        assert step < steps[-1]  # only an old step that orbax was deleting
    start = steps[-1] + 1
  manager = checkpoints.manager(folder)  # removes the temporary folders of killed saves
  assert checkpoints.save(manager, start, state(start, size=512))  # (once they are removed)
  manager.close()
  assert not [p.name for p in (folder / 'checkpoint').iterdir() if 'tmp' in p.name]
  assert_bit_for_bit(checkpoints.restore(folder, start, target(state(0, size=512))),
                     state(start, size=512))
