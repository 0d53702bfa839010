"""The IPython kernel that ``pe-kit reproduce`` starts: ipykernel's, with ``SNDHWM = 0`` (no send limit) on its
IOPub socket, so a backlog is held in memory instead of dropped (:mod:`pe_kit.run.kernel` lifts the client's limit).

Run as ``python -m pe_kit.run.kernel_launcher -f CONNECTION_FILE``. Source: ipykernel ``IPKernelApp.init_iopub``;
zmq_setsockopt(3) ``ZMQ_SNDHWM``; pyzmq ``Context.setsockopt``.
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
