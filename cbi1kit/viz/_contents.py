"""The contents manager Lab runs with (``cbi1kit lab``): jupytext's pairing, saving the stored form.

Loaded by the Jupyter server only (``_lab.CONTENTS_MANAGER``). Saving a paired notebook writes its
py:percent text and its ``.ipynb`` in ``_lab.stored_notebook`` form, whatever the notebook in the
browser holds: outputs, execution counts and the kernel's ``language_info`` stay in the browser.
Opening one adds what Lab would write the moment the kernel starts — the ``language_info`` this
environment's kernel reports and its kernelspec's display name — so the notebook is not marked
modified straight away.
"""

from __future__ import annotations

from typing import Any

import nbformat
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupytext.async_contentsmanager import build_async_jupytext_contents_manager_class

from cbi1kit.viz._lab import KERNELSPEC, paired_text_format, stored_notebook

_JupytextContentsManager: Any = build_async_jupytext_contents_manager_class(AsyncLargeFileManager)


def _kernel_language_info() -> dict[str, Any]:
    """What this environment's ipykernel reports as ``language_info`` (Lab stores it on start)."""
    from ipykernel.ipkernel import IPythonKernel

    return dict(IPythonKernel.language_info)


def _kernelspec_here() -> dict[str, str]:
    """``KERNELSPEC`` as this environment names it (Lab stores its display name on start; an
    environment may have renamed it)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(KERNELSPEC["name"])
    except NoSuchKernel:
        return dict(KERNELSPEC)
    return {**KERNELSPEC, "display_name": spec.display_name}


class NotebookContentsManager(_JupytextContentsManager):  # type: ignore[misc]
    """jupytext's contents manager that stores every paired notebook in its stored form."""

    async def save(self, model: dict[str, Any], path: str = "") -> Any:
        if model.get("type") == "notebook" and model.get("content") is not None:
            config = await self.get_config(path.strip("/"))
            text_format = paired_text_format(config, path.strip("/"))
            if text_format is not None:
                notebook = nbformat.from_dict(model["content"])  # type: ignore[no-untyped-call]
                model = {**model, "content": stored_notebook(notebook, config, text_format)}
        return await super().save(model, path)

    async def get(
        self, path: str, content: bool = True, type: str | None = None, **kwargs: Any
    ) -> Any:
        model = await super().get(path, content=content, type=type, **kwargs)
        if content and model.get("type") == "notebook" and model.get("content") is not None:
            metadata = model["content"]["metadata"]
            if metadata.get("kernelspec") == KERNELSPEC:
                metadata["kernelspec"] = _kernelspec_here()
                metadata.setdefault("language_info", _kernel_language_info())
        return model
