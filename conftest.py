# Makes the ``cluster`` and ``namespace`` fixtures of e2e/testenv available to
# every test folder (operator, gateway and e2e tests alike).
pytest_plugins = ["testenv.pytest_plugin"]
