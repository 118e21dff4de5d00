"""The control plane: its core processes (``core``), the ``AddOn`` protocol every optional component follows
(``addon``), its recorded ``state``, and ``controlplane.ControlPlane``, which owns and wires them all.

Only ``controlplane`` knows the add-ons; ``addon``, ``state``, ``core``, ``kubectl`` and ``processes`` import
nothing of the test bed above them, so every component may use them without a circle.
"""
