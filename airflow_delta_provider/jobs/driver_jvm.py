"""JIT settings for the spark-submit driver JVM of the bundled job.

The job's driver lives for seconds to a few minutes: a cold JVM then spends much of its CPU in the C2
JIT compiler, whose code would pay off only in a long run. `-XX:TieredStopAtLevel=1` keeps the quick
C1 compiler only. On the project's 2-core machine it took the L benchmark job from 25 s to 21 s
(user CPU 40 s to 25 s; `bench/RESULTS.md`). Executors on a cluster are other JVMs and keep their
own settings; in `local[*]` mode the driver is the executor too. Standard library only.
"""

from __future__ import annotations

#: The option `quick_start` adds.
QUICK_START = "-XX:TieredStopAtLevel=1"
#: Options that already choose the JIT: when present, the user's choice stands.
USER_JIT_OPTIONS = ("-XX:TieredStopAtLevel", "-XX:-TieredCompilation", "-XX:+TieredCompilation", "-Xint", "-Xcomp")


def quick_start(java_options: str | None) -> str:
    """`java_options` (a `spark.driver.extraJavaOptions` value) with the C1-only JIT added, unless it
    already chooses a JIT setting."""
    current = (java_options or "").strip()
    if any(token.startswith(USER_JIT_OPTIONS) for token in current.split()):
        return current
    return f"{current} {QUICK_START}" if current else QUICK_START
