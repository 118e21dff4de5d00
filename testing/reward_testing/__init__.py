"""Helpers shared by the test folders (operator, gateway, e2e) and the benchmarks.

Test folders never import each other; whatever two of them need lives here:
free ports and waiting, the fake vLLM, throwaway certificates, the golden
renderings and the pinned vLLM interpreter.
"""
