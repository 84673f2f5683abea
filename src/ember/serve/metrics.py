"""Per-replica request accounting: latencies of the last requests (a bounded window) and
counts by outcome, summarised as p50/p99 and requests per second for the `/metrics`
endpoint. Thread-safe; no Ray here."""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import numpy as np


class RequestMetrics:
    """window: latencies kept for the percentiles (the oldest are dropped)."""

    def __init__(self, window: int = 10_000) -> None:
        self._latencies: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()
        self.started = time.time()
        self.counts: dict[str, int] = {"ok": 0, "client_error": 0, "server_error": 0}
        self.batches = 0
        self.batched_rows = 0

    def record(self, seconds: float, status: int) -> None:
        outcome = "ok" if status < 400 else "client_error" if status < 500 else "server_error"
        with self._lock:
            self.counts[outcome] += 1
            if outcome == "ok":
                self._latencies.append(seconds)

    def record_batch(self, rows: int) -> None:
        with self._lock:
            self.batches += 1
            self.batched_rows += rows

    def summary(self) -> dict[str, Any]:
        with self._lock:
            latencies = np.array(self._latencies, dtype=np.float64) * 1e3
            counts = dict(self.counts)
            batches, rows = self.batches, self.batched_rows
        elapsed = max(time.time() - self.started, 1e-9)
        percentiles = ({f"p{q}_ms": float(np.percentile(latencies, q)) for q in (50, 90, 99)}
                       if latencies.size else {"p50_ms": None, "p90_ms": None, "p99_ms": None})
        return {"requests": counts, "latency_window": int(latencies.size), **percentiles,
                "requests_per_second": sum(counts.values()) / elapsed, "uptime_seconds": elapsed,
                "batches": batches, "mean_batch_rows": rows / batches if batches else None}
