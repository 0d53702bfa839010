"""A Jupyter kernel manager whose client never drops a cell's output messages, for ``pe-kit reproduce``.

A kernel publishes every output (stream text, display data, widget updates, the final ``status: idle``) on its
IOPub ZeroMQ socket. ZeroMQ queues at most 1,000 messages per side of a PUB/SUB link by default (the HWM) and
silently *drops* what does not fit. A cell that draws a ``tqdm.auto`` bar sends one widget message per redraw, a
few thousand in a fraction of a second; on a loaded machine the papermill client reads them more slowly than
the kernel sends, both queues fill, and the messages after them are lost: printed lines, and the ``idle`` message
the client waits for, which papermill then reports as ``CellTimeoutError: Timeout waiting for IOPub output``
however long it waits (measured: a 4,000-step bar under six busy loops on 2 cores lost every printed line and
failed after a 90 s IOPub timeout).

:class:`LosslessKernelManager` gives its clients a ZeroMQ context whose sockets have no receive limit
(``RCVHWM = 0``): the client's ZeroMQ I/O thread (native code, no GIL) keeps reading the kernel's messages into
memory however slowly Python handles them, so the kernel's queue never fills and nothing is dropped; a generous
``iopub_timeout`` (``pe_kit.run.reproduce.IOPUB_TIMEOUT_S``) then gives the client time to handle the backlog.

Source: ZeroMQ ``ZMQ_RCVHWM`` / ``ZMQ_SNDHWM`` (zmq_setsockopt(3): "ØMQ shall take appropriate action such as
blocking or dropping sent messages" on PUB); pyzmq ``Context.setsockopt`` (defaults for new sockets);
``jupyter_client.AsyncKernelManager`` / ``AsyncKernelClient``; nbclient's ``kernel_manager_class``.
"""
from __future__ import annotations

import zmq
import zmq.asyncio
from jupyter_client import AsyncKernelManager
from jupyter_client.asynchronous import AsyncKernelClient
from traitlets import DottedObjectName, default

__all__ = ["LosslessKernelClient", "LosslessKernelManager", "lossless_context", "IOPUB_TIMEOUT_S",
           "KERNEL_START_TIMEOUT_S"]

#: What ``pe-kit reproduce`` passes papermill / nbclient: seconds to wait for a cell's remaining output messages
#: after the kernel replied (nbclient's default of 4 s failed a notebook drawing a tqdm bar on a loaded 2-core
#: machine: "Timeout waiting for IOPub output"; ``raise_on_iopub_timeout`` stays on, so no output is skipped
#: silently) and for a kernel to start. Cells themselves run without a time limit (``execution_timeout=None``).
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
    """``AsyncKernelManager`` whose ``client()`` is a :class:`LosslessKernelClient` (pass it to papermill /
    nbclient as ``kernel_manager_class``)."""

    client_class = DottedObjectName("pe_kit.run.kernel.LosslessKernelClient")

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        """The kernel command, with ``-m ipykernel_launcher`` replaced by ``-m pe_kit.run.kernel_launcher`` (the same
        kernel with no send limit on IOPub); another kernel's command is left as it is."""
        cmd = list(super().format_kernel_cmd(extra_arguments))
        for i in range(len(cmd) - 1):
            if cmd[i] == "-m" and cmd[i + 1] == "ipykernel_launcher":
                cmd[i + 1] = "pe_kit.run.kernel_launcher"
        return cmd

    @default("client_factory")
    def _client_factory_default(self) -> type:
        return LosslessKernelClient
