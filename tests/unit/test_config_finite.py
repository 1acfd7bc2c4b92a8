"""Issue 36 item 5: the config refuses what no run can use, when the run is planned: NaN and
infinity anywhere a number is expected (a --config value or a --configfile), and an n-best list
longer than the beam."""

from __future__ import annotations

import pytest

from pipeline_lib.config_files import ConfigError
from pipeline_lib.run_config import load_config


@pytest.mark.parametrize("config_args, said", [
    (["train={lr: .nan}"], "train.lr=nan"),
    (["hygiene={max_length_ratio: .nan}"], "hygiene.max_length_ratio=nan"),
    (["decode={max_len_a: .inf}"], "decode.max_len_a=inf"),
    (["model_settings={doct: {train: {lr: -.inf}}}"], "model_settings.doct.train.lr=-inf"),
])
def test_nan_and_infinity_are_refused_naming_the_key(config_args, said):
    with pytest.raises(ConfigError, match=rf"{said.replace('.', '[.]')}: not a finite number"):
        load_config(config_args=config_args)


def test_the_same_in_a_config_file(tmp_path):
    own = tmp_path / "config.yaml"
    own.write_text("train: {lr: .NaN}\n")
    with pytest.raises(ConfigError, match=r"train[.]lr=nan: not a finite number"):
        load_config(own)


def test_nbest_over_beam_is_refused_at_planning():
    with pytest.raises(ConfigError, match=r"decode.nbest=5 is more than decode.beam=4"):
        load_config(config_args=["decode={nbest: 5, beam: 4}"])
    assert load_config(config_args=["decode={nbest: 4, beam: 4}"])["decode"]["nbest"] == 4
