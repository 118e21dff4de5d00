"""The gateway's settings, read once from the environment, and the small values it follows from mounted files."""
