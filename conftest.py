# Makes the ``cluster`` and ``namespace`` fixtures of e2e/testenv, and the fake
# vLLM's ``fake_vllm`` and ``backend``, available to every test folder.
pytest_plugins = ["testenv.pytest_plugin", "reward_testing.fake_vllm_fixtures"]
