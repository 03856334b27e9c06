"""Tooling of the demo and the tests, outside the package: JupyterLab and Chromium driving."""
