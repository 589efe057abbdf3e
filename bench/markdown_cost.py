"""What does one long answer cost to render (markdown, code highlighting, sanitizing)?

A model answer of about 20,000 tokens (4 characters a token) built the way Claude writes:
headings, paragraphs with inline code, links and emphasis, nested and task lists, tables
and fenced code blocks in several languages. ``render_uncached`` (the seam's whole pass, the
one the render worker runs) is timed on it, in CPU time (other processes on the machine do
not count): the median of several runs after one untimed.

    python -m bench.markdown_cost                  # prints the figures as JSON
    python -m bench.markdown_cost --tokens 5000 --repeats 9
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

CHARS_PER_TOKEN = 4

_PYTHON = '''```python
def fold(events: list[dict], *, limit: int = {n}) -> dict[str, int]:
    """Count the events of each type, at most {n} of them."""
    counts: dict[str, int] = {{}}
    for event in events[:limit]:
        counts[event["type"]] = counts.get(event["type"], 0) + 1  # one pass
    return counts
```'''
_JS = """```javascript
export function wrapCode(root) {{
  root.querySelectorAll(".md pre").forEach((pre, i) => {{
    const wrap = document.createElement("div");
    wrap.dataset.index = String(i + {n});
    pre.parentNode.insertBefore(wrap, pre);
  }});
}}
```"""
_SHELL = """```bash
$ cd /work/project && make test PYTEST_ARGS="-k case_{n} -q"
4 passed, 1 skipped in {n}.20s
```"""
_DIFF = """```diff
- return render(text)
+ return render(text[:MAX_{n}])
```"""


def section(n: int) -> str:
    """One section of the answer (about 1,500 characters); ``n`` keeps sections distinct."""
    code = (_PYTHON, _JS, _SHELL, _DIFF)[n % 4].format(n=n)
    return f"""## Step {n}: read `module_{n}.py` and fix the **fold**

The fold in `agent/ui/transcript_{n}.py` walks every event once; the bug is in *how* it
joins tool results to their card, see https://example.com/issues/{n}?tab=comments and
[the spec](https://github.github.com/gfm/#lists). It never drops an event, ~~but it~~ and
it keeps the order.
Things to check:
- the `tool_result` event without a matching call
  - nested: the call arrives **after** its result ({n} ms later)
  - nested: the call never arrives
- the error path, which offers a retry
1. run the failing test
2. read the traceback

- [x] reproduce the failure in test_{n}
- [ ] fix the fold
- [ ] add a regression test

| file | lines | change |
|:-----|------:|:------:|
| `transcript_{n}.py` | {n + 10} | fold |
| `fragments.py` | {n * 3} | none |

{code}

> Note: the writer stores the partial text once a second, so a crash loses at most
> one second of answer {n}.
"""


def answer(tokens: int = 20_000) -> str:
    chars, parts, n = tokens * CHARS_PER_TOKEN, ["# Fixing the transcript fold\n"], 0
    while sum(map(len, parts)) < chars:
        n += 1
        parts.append(section(n))
    return "\n".join(parts)


def measure(tokens: int = 20_000, repeats: int = 7) -> dict:
    from agent.ui.markdown import render_uncached

    text = answer(tokens)
    html = render_uncached(text)  # untimed: imports, lexers and first-use caches
    times = []
    for _ in range(repeats):
        started = time.thread_time()
        render_uncached(text)
        times.append((time.thread_time() - started) * 1000)
    return {
        "tokens": tokens,
        "markdown_chars": len(text),
        "html_chars": len(html),
        "code_blocks": text.count("```") // 2,
        "repeats": repeats,
        "render_cpu_ms_median": round(statistics.median(times), 1),
        "render_cpu_ms_min": round(min(times), 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.tokens, args.repeats), indent=2))


if __name__ == "__main__":
    main()
