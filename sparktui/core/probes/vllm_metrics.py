"""vLLM `/metrics` (Prometheus text) and `/health` -> VllmStatus figures."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from sparktui.core.model import VllmStatus

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # new name, pre-0.12 name
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"

WANTED = (RUNNING, WAITING, *KV_CACHE, PROMPT_TOKENS, GENERATION_TOKENS)

# Latency histograms: time to first token, and inter-token latency (pre-0.11 name second).
TTFT = ("vllm:time_to_first_token_seconds",)
ITL = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
HISTOGRAMS = (*TTFT, *ITL)


def _samples(text: str) -> dict[str, list[float]]:
    """Sample values by sample name for the metrics we use. A text the parser chokes on is
    re-read line by line, so one bad line costs only itself."""
    out: dict[str, list[float]] = {}

    def feed(chunk: str) -> None:
        for family in text_string_to_metric_families(chunk):
            for s in family.samples:
                if s.name in WANTED:
                    out.setdefault(s.name, []).append(float(s.value))

    try:
        feed(text)
    except (ValueError, TypeError, IndexError, KeyError):  # the parser's errors on junk
        out.clear()
        for line in text.splitlines():
            if line.startswith("vllm:"):
                try:
                    feed(line + "\n")
                except (ValueError, TypeError, IndexError, KeyError):
                    continue
    return out


def parse_histograms(text: str) -> dict[str, Histogram]:
    """The latency histograms (HISTOGRAMS) in a /metrics text, summed over engines and labels:
    family name -> Histogram (cumulative bucket counts by upper bound, count, sum)."""
    out: dict[str, Histogram] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError, KeyError):  # junk: no latency this time
        return out
    for family in families:
        if family.name not in HISTOGRAMS or family.type != "histogram":
            continue
        buckets: dict[float, float] = {}
        count = total = 0.0
        for s in family.samples:
            if s.name.endswith("_bucket"):
                le = float(s.labels.get("le", "inf").replace("+Inf", "inf"))
                buckets[le] = buckets.get(le, 0.0) + float(s.value)
            elif s.name.endswith("_count"):
                count += float(s.value)
            elif s.name.endswith("_sum"):
                total += float(s.value)
        out[family.name] = Histogram(tuple(sorted(buckets.items())), count, total)
    return out


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram: cumulative `(upper bound, count)` pairs, ascending."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float

    def minus(self, older: Histogram) -> Histogram | None:
        """The observations made since `older` (None after a counter reset)."""
        old = dict(older.buckets)
        if self.count < older.count or any(c < old.get(le, 0.0) for le, c in self.buckets):
            return None
        return Histogram(
            tuple((le, c - old.get(le, 0.0)) for le, c in self.buckets),
            self.count - older.count,
            self.sum - older.sum,
        )

    def quantile(self, q: float) -> float | None:
        """Prometheus' histogram_quantile: linear inside the bucket that holds rank q*count
        (None with no observations; the last finite bound when it falls in +Inf)."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        prev_le, prev_c = 0.0, 0.0
        for le, c in self.buckets:
            if c >= rank:
                if le == float("inf"):
                    return prev_le
                if c == prev_c:
                    return le
                return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
            prev_le, prev_c = le, c
        return prev_le

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


def parse_vllm_metrics(text: str, status: VllmStatus | None = None) -> VllmStatus:
    """Fill running/waiting/kv_cache_pct/token counters of `status` (a new one by default).

    Gauges and counters are summed over engines and labels; the KV-cache fraction (0..1)
    is averaged over engines and given in percent. Missing metrics stay None.
    """
    st = status if status is not None else VllmStatus()
    samples = _samples(text)
    if RUNNING in samples:
        st.running = sum(samples[RUNNING])
    if WAITING in samples:
        st.waiting = sum(samples[WAITING])
    for name in KV_CACHE:
        if samples.get(name):
            vals = samples[name]
            st.kv_cache_pct = 100.0 * sum(vals) / len(vals)
            break
    if PROMPT_TOKENS in samples:
        st.prompt_tokens_total = sum(samples[PROMPT_TOKENS])
    if GENERATION_TOKENS in samples:
        st.generation_tokens_total = sum(samples[GENERATION_TOKENS])
    hists = parse_histograms(text)
    st.histograms = {
        kind: h
        for kind, names in (("ttft", TTFT), ("itl", ITL))
        for h in [next((hists[n] for n in names if n in hists), None)]
        if h is not None
    }
    return st


def tokens_per_s(
    prev_total: float | None, prev_at: float | None, cur_total: float | None, cur_at: float | None
) -> float | None:
    """Rate of a token counter between two samples (None on a reset, a gap, or no time)."""
    if None in (prev_total, prev_at, cur_total, cur_at):
        return None
    assert prev_total is not None and prev_at is not None
    assert cur_total is not None and cur_at is not None
    dt = cur_at - prev_at
    if dt <= 0 or cur_total < prev_total:
        return None
    return (cur_total - prev_total) / dt


def generation_rate(
    prev: VllmStatus | None, prev_at: float | None, cur: VllmStatus, cur_at: float
) -> float | None:
    """Generated tokens/s between two successive VllmStatus samples taken at the given times."""
    if prev is None:
        return None
    return tokens_per_s(prev.generation_tokens_total, prev_at, cur.generation_tokens_total, cur_at)


def health_from_code(code: int | None) -> tuple[bool | None, str]:
    """HTTP status of GET /health -> (healthy, detail). 200 healthy, 503 engine dead,
    None/0 not reachable (not serving yet, or loading weights)."""
    if not code:
        return None, "not reachable"
    if code == 200:
        return True, "healthy"
    if code == 503:
        return False, "unhealthy (503: engine dead)"
    return False, f"unexpected HTTP {code}"
