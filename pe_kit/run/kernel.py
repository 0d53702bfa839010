"""A Jupyter kernel and kernel manager that never drop a cell's output messages, for ``pe-kit reproduce``.

ZeroMQ drops IOPub messages past 1,000 queued per side (its high-water mark), losing printed lines and the ``idle``
message papermill waits for (``CellTimeoutError: Timeout waiting for IOPub output``). Here both sides queue without
limit (``RCVHWM = 0`` on the client, ``SNDHWM = 0`` on the kernel started as ``python -m pe_kit.run.kernel``).
"""
from __future__ import annotations

import zmq
import zmq.asyncio
from jupyter_client import AsyncKernelManager
from jupyter_client.asynchronous import AsyncKernelClient
from traitlets import DottedObjectName, default

__all__ = ["LosslessKernelClient", "LosslessKernelManager", "IOPUB_TIMEOUT_S", "KERNEL_START_TIMEOUT_S"]

#: Seconds papermill / nbclient wait for a cell's remaining output after the kernel replied (the default 4 s timed
#: out on a loaded machine; ``raise_on_iopub_timeout`` stays on) and for a kernel to start; cells have no limit.
IOPUB_TIMEOUT_S = 600
KERNEL_START_TIMEOUT_S = 300


class LosslessKernelClient(AsyncKernelClient):
    """``AsyncKernelClient`` whose sockets queue without limit on receipt (``RCVHWM = 0``)."""

    @default("context")
    def _context_default(self) -> zmq.asyncio.Context:
        self._created_context = True
        ctx = zmq.asyncio.Context()
        ctx.setsockopt(zmq.RCVHWM, 0)
        return ctx


class LosslessKernelManager(AsyncKernelManager):
    """``AsyncKernelManager`` whose ``client()`` is a :class:`LosslessKernelClient`."""

    client_class = DottedObjectName("pe_kit.run.kernel.LosslessKernelClient")

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        """The kernel command, with ``-m ipykernel_launcher`` replaced by ``-m pe_kit.run.kernel``."""
        cmd = list(super().format_kernel_cmd(extra_arguments))
        for i in range(len(cmd) - 1):
            if cmd[i] == "-m" and cmd[i + 1] == "ipykernel_launcher":
                cmd[i + 1] = "pe_kit.run.kernel"
        return cmd

    @default("client_factory")
    def _client_factory_default(self) -> type:
        return LosslessKernelClient


if __name__ == "__main__":  # the kernel process (LosslessKernelManager.format_kernel_cmd)
    from ipykernel.kernelapp import IPKernelApp

    class LosslessIPKernelApp(IPKernelApp):
        """``IPKernelApp`` whose IOPub socket queues without limit (``SNDHWM = 0``) instead of dropping messages."""

        def init_iopub(self, context):
            context.setsockopt(zmq.SNDHWM, 0)
            super().init_iopub(context)

    LosslessIPKernelApp.launch_instance()
