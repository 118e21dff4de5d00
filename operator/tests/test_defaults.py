from reward_operator.api.defaults import apply_defaults


def test_defaults_fill_nested_objects_like_the_api_server():
    obj = {"spec": {"model": {"uri": "hf://org/m"}}}
    defaulted = apply_defaults(obj)
    spec = defaulted["spec"]
    assert spec["model"]["kind"] == "sequence"
    assert spec["model"]["tensorParallelSize"] == 1
    assert "runtime" not in spec  # render/runtime.py picks it by resources.gpus
    assert spec["resources"] == {"gpus": 1}
    assert spec["serving"] == {"mode": "Standard", "minReplicas": 1, "maxReplicas": 1}
    assert obj == {"spec": {"model": {"uri": "hf://org/m"}}}, "the input is not modified"


def test_defaults_keep_what_the_user_set():
    obj = {
        "spec": {
            "model": {"uri": "hf://org/m", "kind": "token"},
            "serving": {"mode": "Knative", "minReplicas": 0},
        }
    }
    spec = apply_defaults(obj)["spec"]
    assert spec["model"]["kind"] == "token"
    assert spec["serving"] == {"mode": "Knative", "minReplicas": 0, "maxReplicas": 1}


def test_defaults_reach_into_list_items():
    obj = {"spec": {"model": {"uri": "hf://org/m"}, "credentials": {"huggingFaceToken": {"name": "hf"}}}}
    assert apply_defaults(obj)["spec"]["credentials"]["huggingFaceToken"] == {"name": "hf", "key": "HF_TOKEN"}
