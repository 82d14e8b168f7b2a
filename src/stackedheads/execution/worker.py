"""``python -m stackedheads.execution.worker``: one training job in its own process (the local executor
with ``workers > 1``). Reads the job as JSON on stdin, reports ``done total`` lines on stdout,
and ends with exit 0, or 2 and one line on stderr for a user error (a bad config, a held lock):
the UsageError's message and fields as JSON."""

from __future__ import annotations

import json
import sys


def main() -> None:
    from stackedheads.errors import UsageError

    try:
        from stackedheads.execution.executors import Job, run_job
        from stackedheads.execution.process import configure_process

        spec = json.loads(sys.stdin.read())
        job = Job.from_dict(spec["job"])
        last = [-1]

        def progress(done: int, total: int) -> None:
            if done == total or done - last[0] >= max(1, total // 200):  # ~200 lines per job
                last[0] = done
                print(done, total, flush=True)

        configure_process(spec["threads"], job.config.device)  # this process is the job's
        run_job(job, spec["out"], progress, spec["threads"])
    except UsageError as e:
        print(json.dumps({"message": str(e), "fields": e.fields}), file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # the parent was interrupted too; the job resumes next time
        sys.exit(130)


if __name__ == "__main__":
    main()
