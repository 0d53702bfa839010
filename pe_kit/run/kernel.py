"""A Jupyter kernel and kernel manager that never drop a cell's output messages, for ``pe-kit reproduce``.

ZeroMQ queues at most 1,000 messages per side of the IOPub PUB/SUB link and silently drops the rest; a
``tqdm.auto`` bar on a loaded machine overflows it, losing printed lines and the ``idle`` message papermill waits
for (``CellTimeoutError: Timeout waiting for IOPub output``). :class:`LosslessKernelManager` gives its clients a
ZeroMQ context with ``RCVHWM = 0`` (no receive limit) and starts the kernel as ``python -m pe_kit.run.kernel``
(ipykernel's, with ``SNDHWM = 0`` on its IOPub socket), so a backlog is held in memory; :data:`IOPUB_TIMEOUT_S`
gives time to handle it.

Source: zmq_setsockopt(3) ``ZMQ_RCVHWM`` / ``ZMQ_SNDHWM``; pyzmq ``Context.setsockopt``; ipykernel
``IPKernelApp.init_iopub``; ``jupyter_client.AsyncKernelManager``; nbclient's ``kernel_manager_class``.
"""
from __future__ import annotations

import zmq
import zmq.asyncio
from jupyter_client import AsyncKernelManager
from jupyter_client.asynchronous import AsyncKernelClient
from traitlets import DottedObjectName, default

__all__ = ["LosslessKernelClient", "LosslessKernelManager", "lossless_context", "IOPUB_TIMEOUT_S",
           "KERNEL_START_TIMEOUT_S"]

#: Seconds papermill / nbclient wait for a cell's remaining output after the kernel replied (the default 4 s timed
#: out on a loaded machine; ``raise_on_iopub_timeout`` stays on) and for a kernel to start; cells have no limit.
IOPUB_TIMEOUT_S = 600
KERNEL_START_TIMEOUT_S = 300


def lossless_context() -> zmq.asyncio.Context:
    """A new asyncio ZeroMQ context whose sockets queue without limit on receipt (``RCVHWM = 0``)."""
    ctx = zmq.asyncio.Context()
    ctx.setsockopt(zmq.RCVHWM, 0)
    return ctx


class LosslessKernelClient(AsyncKernelClient):
    """``AsyncKernelClient`` on a :func:`lossless_context`: its IOPub socket never drops a message."""

    @default("context")
    def _context_default(self) -> zmq.asyncio.Context:
        self._created_context = True
        return lossless_context()


class LosslessKernelManager(AsyncKernelManager):
    """``AsyncKernelManager`` whose ``client()`` is a :class:`LosslessKernelClient` (nbclient
    ``kernel_manager_class``)."""

    client_class = DottedObjectName("pe_kit.run.kernel.LosslessKernelClient")

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        """The kernel command, with ``-m ipykernel_launcher`` replaced by ``-m pe_kit.run.kernel`` (the same kernel
        with no send limit on IOPub); another kernel's command is left as it is."""
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
