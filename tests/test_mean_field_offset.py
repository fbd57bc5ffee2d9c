"""scripts/mean_field_offset.py: the refitted rate, the entries' scale against the spectral
radius, and the table cells it reads."""

import math

import numpy as np

from scripts import mean_field_offset


def test_refitted_rate_of_an_exact_geometric_profile_is_its_rate():
  row = {f'ratio_k{k}': repr(0.93 ** k) for k in (20, 40, 60)}
  assert math.isclose(mean_field_offset.refitted_rate(row), 0.93, rel_tol=1e-12)
  row['ratio_k60'] = '< 1.2e-38'  # below float32's smallest normal: no rate
  assert math.isnan(mean_field_offset.refitted_rate(row))


def test_scale_ratio_is_the_frobenius_scale_over_the_spectral_radius():
  # diag(2, 1): ||W||_F / sqrt(H) = sqrt(5 / 2), rho = 2
  cell = {'W_hh': np.diag([2.0, 1.0])}
  assert math.isclose(mean_field_offset.scale_ratio(cell), math.sqrt(2.5) / 2, rel_tol=1e-12)
  # a rotation by 90 degrees times 3: eigenvalues +-3i, singular values 3 and 3
  rotation = 3 * np.array([[0.0, -1.0], [1.0, 0.0]])
  assert math.isclose(mean_field_offset.scale_ratio({'W_hh': rotation}), 1.0,
                      rel_tol=1e-12)
