# Makes the ``cluster`` and ``namespace`` fixtures of e2e/testenv, the fake
# vLLM's ``fake_vllm`` and ``backend``, and the real gateway process's
# ``run_gateway`` and the tiny models' ``tiny_models`` available to every test folder.
pytest_plugins = [
    "testenv.pytest_plugin",
    "reward_testing.fake_vllm_fixtures",
    "reward_testing.gateway_fixtures",
    "reward_testing.tiny_models",
]
