# Makes the ``cluster`` and ``namespace`` fixtures of e2e/testenv (and the ``versitygw`` binary it builds),
# the fake vLLM's ``fake_vllm`` and ``backend``, the real gateway process's ``run_gateway``, the tiny models'
# ``tiny_models`` and a real S3-compatible server's ``object_store`` available to every test folder.
pytest_plugins = [
    "testenv.pytest_plugin",
    "reward_testing.fake_vllm_fixtures",
    "reward_testing.gateway_fixtures",
    "reward_testing.tiny_models",
    "reward_testing.object_store_fixtures",
]
