"""Every float model in ../shared/models, compiled and linked into a C program built with
-Wall -Werror, reproduces test_data_set_0 within the project's tolerance, through both the
static and the dynamic header API."""
import pytest

from util import FLOAT_MODELS, assert_close_to_reference, is_tflite_reference, model_path, \
    reference_data
import glowpy
from glowpy.runtime import Bundle


@pytest.mark.parametrize("api", ["static", "dynamic"])
@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_model_matches_reference(name, api, tmp_path):
    info = glowpy.compile(model_path(name), str(tmp_path), bundle_api=api)
    inputs, outputs = reference_data(name)
    assert len(inputs) == len(info.inputs) and len(outputs) == len(info.outputs)
    got = Bundle(str(tmp_path), info.name).run({p["name"]: x for p, x in zip(info.inputs, inputs)})
    for p, ref in zip(info.outputs, outputs):
        assert_close_to_reference(got[p["name"]], ref, is_tflite_reference(name), f"{name}:{p['name']}")
