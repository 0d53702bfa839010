"""The IPython kernel that ``pe-kit reproduce`` starts: ipykernel's, with no send limit on its IOPub socket.

ipykernel binds its IOPub (X)PUB socket with ZeroMQ's default send high-water mark of 1,000 messages and ZeroMQ
drops what does not fit. :mod:`pe_kit.run.kernel` lifts the client's receive limit; when the client's I/O thread
is itself starved of CPU (one busy loop per core), the kernel's own queue still filled and printed lines were lost
(seen once in a clean-clone CI run: ``tests/test_reproduce_load.py``, two of eleven lines). Here the kernel's
sockets are created with ``SNDHWM = 0`` (no limit), so the kernel holds a backlog in memory instead of dropping it.

Run as ``python -m pe_kit.run.kernel_launcher -f CONNECTION_FILE`` (what ``LosslessKernelManager`` starts in place
of ``ipykernel_launcher``). Source: ipykernel ``IPKernelApp.init_iopub``; ZeroMQ ``ZMQ_SNDHWM``
(zmq_setsockopt(3)); pyzmq ``Context.setsockopt`` (the default for sockets created afterwards).
"""
from __future__ import annotations

import zmq
from ipykernel.kernelapp import IPKernelApp

__all__ = ["LosslessIPKernelApp"]


class LosslessIPKernelApp(IPKernelApp):
    """``IPKernelApp`` whose IOPub socket queues without limit (``SNDHWM = 0``) instead of dropping messages."""

    def init_iopub(self, context):
        context.setsockopt(zmq.SNDHWM, 0)
        super().init_iopub(context)


if __name__ == "__main__":
    LosslessIPKernelApp.launch_instance()
