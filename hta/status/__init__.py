"""A live view of a running ``hta makeflow``.

One JSON-able :class:`~hta.status.snapshot.StatusSnapshot`, built from the
controller by :func:`~hta.status.snapshot.build_snapshot`, feeds everything a
person or a program sees while a run is in progress: the HTTP server
(``/status``, ``/metrics``, the page at ``/``), the terminal panel and the
plain lines, and ``hta status URL``. One builder, so a number means the same
thing in every view.
"""
