"""The model's identity as the operator renders it for the gateway: the revision and digest in its environment,
the RewardModel's generation in the identity ConfigMap it mounts and follows; and the gateway's own loader and
file follower reading what is rendered. The whole children are in the golden files."""

from __future__ import annotations

import copy

import pytest
from rendered_gateway_settings import PREFIX, env, loadable

from reward_gateway.config.gateway import load_config
from reward_gateway.config.generation import followed
from reward_operator.api.defaults import apply_defaults
from reward_operator.render import render_reward_model, rendered_reward_model
from reward_operator.render.model_identity import digest, revision
from reward_testing.paths import golden_input
from reward_testing.projected_volume import project

SCHEDULED = golden_input("sequence-scheduling")
PLAIN = golden_input("sequence-standard")
SPLIT = golden_input("sequence-canary-split-allowed-clients")


def children(reward_model: dict) -> dict[str, dict]:
    """The children by name."""
    return {c["metadata"]["name"]: c for c in render_reward_model(reward_model)}


def transformer(reward_model: dict) -> dict:
    return children(reward_model)[reward_model["metadata"]["name"]]["spec"]["transformer"]


def test_the_gateway_says_which_weights_scored_with_the_revision_and_the_pinned_digest(tmp_path):
    identity = load_config(loadable(env(SCHEDULED), tmp_path)).identity
    uri = SCHEDULED["spec"]["model"]["uri"]
    assert identity.revision == uri
    assert identity.digest == uri.rpartition(":")[2]
    plain = load_config(env(PLAIN)).identity
    assert (plain.revision, plain.digest) == (PLAIN["spec"]["model"]["uri"], None)


def test_the_candidate_has_its_own_revision(tmp_path):
    rendered = env(SPLIT)
    rendered[PREFIX + "CANARY_PERCENT_FILE"] = str(tmp_path / "percent")  # read when it runs, not at load
    rendered.pop(PREFIX + "CHAT_TEMPLATE_FILE", None)
    rendered.pop(PREFIX + "CANARY_CHAT_TEMPLATE_FILE", None)
    rendered[PREFIX + "CHAT_TEMPLATE_MODE"] = "upstream"
    config = load_config(rendered)
    assert config.identity.revision == SPLIT["spec"]["model"]["uri"]
    assert config.canary.identity.revision == SPLIT["spec"]["canary"]["model"]["uri"]


@pytest.mark.parametrize(
    ("uri", "shown", "pinned"),
    [
        ("hf://org/model", "hf://org/model", None),
        ("hf://org/model:main", "hf://org/model:main", None),  # a branch moves: no digest
        ("hf://org/model:" + "a" * 40, "hf://org/model:" + "a" * 40, "a" * 40),
        ("oci://registry.local/rm:1", "oci://registry.local/rm:1", None),
        (
            "oci://registry.local/rm@sha256:" + "b" * 64,
            "oci://registry.local/rm@sha256:" + "b" * 64,
            "sha256:" + "b" * 64,
        ),
        ("s3://bucket/rm", "s3://bucket/rm", None),
        # what only the download needs is never repeated to trainers
        ("https://user:pw@files.local/rm.tar.gz?X-Amz-Signature=abc#x", "https://files.local/rm.tar.gz", None),
    ],
)
def test_the_revision_shown_and_the_digest_a_uri_pins(uri, shown, pinned):
    assert (revision(uri), digest(uri)) == (shown, pinned)


def test_the_gateway_answers_with_the_generation_the_operator_writes(tmp_path):
    """The operator's half of the generation's contract, read by the gateway's own loader and follower."""
    rendered = env(PLAIN)
    config_map = children(PLAIN)["skywork-rm-identity"]
    ((key, value),) = config_map["data"].items()
    assert value == str(PLAIN["metadata"]["generation"])
    mount = next(m for m in transformer(PLAIN)["containers"][0]["volumeMounts"] if m["name"] == "identity")
    assert rendered[PREFIX + "MODEL_GENERATION_FILE"] == f"{mount['mountPath']}/{key}"
    path = project(tmp_path, value, key)  # where the pod sees it, here
    config = load_config({**rendered, PREFIX + "MODEL_GENERATION_FILE": str(path)})
    identity = {"generation": None}
    followed(str(config.identity.generation_file), [identity])
    assert identity["generation"] == PLAIN["metadata"]["generation"]


def test_a_spec_edit_that_changes_no_pod_moves_the_generation_without_touching_the_gateways_pods():
    """The generation is in a ConfigMap the pods follow: in the pod template it would roll every gateway."""
    edited = copy.deepcopy(PLAIN)
    edited["metadata"]["generation"] = PLAIN["metadata"]["generation"] + 5
    edited["spec"]["serving"]["maxReplicas"] = 9
    before, after = transformer(PLAIN), transformer(edited)
    assert (after["containers"], after["volumes"]) == (before["containers"], before["volumes"])
    assert children(edited)["skywork-rm-identity"]["data"] == {"generation": str(edited["metadata"]["generation"])}


def test_an_offline_render_of_a_reward_model_not_stored_yet_says_its_generation_is_unknown():
    unstored = copy.deepcopy(PLAIN)
    del unstored["metadata"]["generation"]
    assert children(unstored)["skywork-rm-identity"]["data"] == {"generation": ""}


def test_the_identitys_prune_labels_select_it_and_never_a_chat_template():
    """The controller prunes it, once the gateway is disabled, by the owner's labels plus its set's own (a
    set declared only then: while the gateway is on, its one name is rendered)."""
    enabled = golden_input("sequence-gateway-auth")
    assert not any(owned.kind == "ConfigMap" for owned in rendered_reward_model(apply_defaults(enabled), None).owned)
    config_maps = [c for c in render_reward_model(enabled) if c["kind"] == "ConfigMap"]  # as applied before
    disabled = copy.deepcopy(enabled)
    disabled["spec"]["gateway"] = {"enabled": False, "chatTemplateMode": "upstream"}
    rendered = rendered_reward_model(apply_defaults(disabled), None)
    (owned,) = [o for o in rendered.owned if o.kind == "ConfigMap"]
    selected = [c["metadata"]["name"] for c in config_maps if owned.labels.items() <= c["metadata"]["labels"].items()]
    assert selected == ["guarded-rm-identity"] and len(config_maps) == 2
    assert rendered.kept(owned) == set()
