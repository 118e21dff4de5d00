"""Pure decisions on observed data: readiness, dependencies, status and events.

Nothing here reads the cluster: the cluster layer gathers what a decision needs
and hands it over, so every rule is table-tested in operator/tests.
"""
