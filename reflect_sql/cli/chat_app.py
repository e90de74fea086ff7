"""Aria's web chat (paper section 8): a FastAPI app, server-rendered, fully offline.

A tab posts a question and follows it on a server-sent event stream: its place in the queue, each
loop step as it starts and as it ends (decision and scores), then the answer: the sentence, the
result table, the final SQL and the cost. Questions queue for the one model on a single worker
thread; every tab sees its own place.

The KB learns from the chat only what both the judges and the manager verified. The program's own
enrichment of a fully verified answer is held (``HeldEnrichment``) until the manager's verdict:
"correct" sends it through the same anti-pollution path (``kb.enrich.enrich``, which re-checks
every judgment) with the human verdict added, recorded as human-verified in the KB history;
"wrong" is recorded (``kb.verdicts``) and never enriches. Every page, script and style is served
from this package: nothing is fetched from elsewhere.
"""
from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable

# At module level: FastAPI reads the routes' annotations (strings here) in this module's namespace.
from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from sse_starlette.sse import EventSourceResponse

CHAT_FILES = files("reflect_sql.cli") / "chat"
POLL_SECONDS = 0.1  # how often a stream looks for new events; a question takes seconds to minutes
SHOWN_ROWS = 50
HELD = "held for the manager's verdict"
TICK_SECONDS = 0.25  # how often a running question's steps are looked at for new decisions and scores


class HeldEnrichment:
    """The retriever the program sees: it retrieves as the KB's own, but an enrichment the program
    asks for is held for the manager's verdict instead of written."""

    def __init__(self, open_retriever: Callable[[], Any]):
        self._open = open_retriever
        self._inner = open_retriever()
        self.held: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def retrieve(self, question: str, k: int, m: int, evidence: str = "", **renderings: Any) -> Any:
        return self._inner.retrieve(question, k, m, evidence, **renderings)

    def enrich(self, question: str, sql: str, result: Any, judgments: dict, evidence: str = "") -> dict[str, Any]:
        self.held = {"question": question, "sql": sql, "result": result, "judgments": dict(judgments),
                     "evidence": evidence}
        return {"accepted": None, "held": "for the manager's verdict"}

    def reopen(self) -> None:
        """Read the KB again, so the next question sees what a verdict taught it."""
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()
        self._inner = self._open()

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


@dataclass
class Job:
    id: str
    question: str
    evidence: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    answer: dict[str, Any] | None = None
    held: dict[str, Any] | None = None
    verdict: str | None = None


class AskQueue:
    """Questions in arrival order, answered one at a time by one worker thread."""

    def __init__(self, answer: Callable[[Job, Callable[[dict[str, Any]], None]], None]):
        self._answer = answer
        self._lock = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._running: Job | None = None
        self.jobs: dict[str, Job] = {}
        self._thread = threading.Thread(target=self._work, name="aria-worker", daemon=True)
        self._thread.start()

    def submit(self, question: str, evidence: str = "") -> Job:
        job = Job(uuid.uuid4().hex[:12], question, evidence)
        with self._lock:
            self.jobs[job.id] = job
            self._waiting.append(job)
            self._lock.notify_all()
        return job

    def position(self, job: Job) -> int | None:
        """0 while it is answered, n when n-1 questions are before it, None once answered."""
        with self._lock:
            if job is self._running:
                return 0
            try:
                return self._waiting.index(job) + 1
            except ValueError:
                return None

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._waiting:
                    self._lock.wait()
                job = self._waiting.popleft()
                self._running = job
            try:
                self._answer(job, job.events.append)
            except Exception as exc:  # noqa: BLE001 - one question's failure must not stop the queue
                job.events.append({"type": "error", "message": f"{type(exc).__name__}: {exc}"})
            finally:
                with self._lock:
                    self._running = None
                    job.finished = True


class Answerer:
    """Runs one question: the program, then the sentence, streaming each trace step."""

    def __init__(self, program: Any, sentence: Any, retriever: HeldEnrichment, lm: Any, adapter: Any):
        self.program, self.sentence, self.retriever = program, sentence, retriever
        self.lm, self.adapter = lm, adapter
        self.reload = threading.Event()

    def __call__(self, job: Job, emit: Callable[[dict[str, Any]], None]) -> None:
        import dspy

        from reflect_sql.programs import prediction_to_json
        from reflect_sql.programs.trace import TraceStep, watching

        if self.reload.is_set():
            self.reload.clear()
            self.retriever.reopen()
        steps: list[Any] = []
        shown: dict[int, str] = {}
        lock = threading.Lock()

        def flush() -> None:
            """Emit every step whose content changed since it was last shown. A step is running
            until the loop gives it a decision: some loops add their step before the LM call,
            others after, so only the decision says it has ended."""
            with lock:
                for index, step in enumerate(steps):
                    try:
                        data = step.to_json()
                    except RuntimeError:  # the loop was filling it in just now; the next tick shows it
                        continue
                    if data["loop"] == "enrichment" and self.retriever.held is not None:
                        data["decision"] = HELD
                    text = json.dumps(data, sort_keys=True)
                    if shown.get(index) != text:
                        shown[index] = text
                        emit({"type": "step", "index": index, "step": data, "running": not data.get("decision")})

        def on_step(step: Any) -> None:
            with lock:
                steps.append(step)
            flush()

        done = threading.Event()

        def tick() -> None:  # a step's decision and scores appear while the next LM call runs
            while not done.wait(TICK_SECONDS):
                flush()

        ticker = threading.Thread(target=tick, name=f"aria-ticker-{job.id}", daemon=True)
        ticker.start()
        self.retriever.held = None
        try:
            with dspy.context(lm=self.lm, adapter=self.adapter), watching(on_step):
                prediction = self.program(question=job.question, evidence=job.evidence)
                on_step(TraceStep("answer", 0, 0))  # the sentence is written after the program's own trace
                prediction = self.sentence(question=job.question, prediction=prediction)
        finally:
            done.set()
            ticker.join()
        job.held = self.retriever.held
        for step in prediction.trace:
            if step["loop"] == "enrichment" and job.held is not None:
                step["decision"] = HELD
        job.answer = prediction_to_json(prediction)
        emit({"type": "answer", "answer": job.answer})


def _label(step: dict[str, Any]) -> str:
    if step["loop"] == "synthesis.syntax":
        return f"{step['round']}.{(step.get('inputs') or {}).get('generation', 0)}.{step['iteration']}"
    return f"{step['round']}.{step['iteration']}"


def create_app(answer: Callable[[Job, Callable[[dict[str, Any]], None]], None], kb_dir: str | Path,
               database: str, on_enriched: Callable[[], None] = lambda: None):
    """The chat app: ``answer(job, emit)`` answers one question (an ``Answerer``); ``kb_dir`` is the
    KB the verdicts teach; ``on_enriched`` is called when a verdict changed the KB."""
    from reflect_sql.cli.ask_cmd import LOOP_NAMES, compact_scores
    from reflect_sql.kb.enrich import enrich, history
    from reflect_sql.kb.verdicts import VERDICTS, record_verdict

    app = FastAPI(title="Aria", docs_url=None, redoc_url=None, openapi_url=None)
    templates = Jinja2Templates(directory=str(CHAT_FILES / "templates"))
    templates.env.filters["cell"] = lambda v: "NULL" if v is None else str(v)
    app.mount("/static", StaticFiles(directory=str(CHAT_FILES / "static")), name="static")
    queue = AskQueue(answer)
    app.state.queue = queue

    def fragment(name: str, **context: Any) -> str:
        return templates.get_template(name).render(**context)

    def step_html(step: dict[str, Any], running: bool) -> str:
        cost = step.get("cost") or {}
        return fragment("_step.html", step=step, running=running, label=_label(step),
                        loop=LOOP_NAMES.get(step["loop"], step["loop"]),
                        scores=compact_scores(step["loop"], step.get("scores") or {}),
                        seconds=f"{cost['seconds']:.1f}s" if cost.get("lm_calls") else "")

    def rendered(event: dict[str, Any], job: Job) -> dict[str, str]:
        if event["type"] == "step":
            data = {"index": event["index"], "html": step_html(event["step"], event["running"])}
        elif event["type"] == "answer":
            answer = event["answer"]
            data = {"steps": [step_html(s, False) for s in answer["trace"]],
                    "html": fragment("_answer.html", job=job, a=answer, rows=answer["rows"][:SHOWN_ROWS])}
        else:
            data = {"html": fragment("_error.html", message=event["message"])}
        return {"event": event["type"], "data": json.dumps(data, ensure_ascii=False)}

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request):
        return templates.TemplateResponse(request, "index.html", {"database": database, "kb_dir": str(kb_dir)})

    @app.post("/ask")
    def ask(question: str = Form(...), evidence: str = Form("")):
        from reflect_sql.errors import UserError
        from reflect_sql.errors import require_question

        try:
            question = require_question(question)
        except UserError as exc:
            raise HTTPException(400, str(exc)) from None
        job = queue.submit(question, evidence)
        return {"job": job.id, "position": queue.position(job)}

    def job_of(job_id: str) -> Job:
        job = queue.jobs.get(job_id)
        if job is None:
            raise HTTPException(404, f"no question {job_id}")
        return job

    @app.get("/jobs/{job_id}/events")
    async def events(job_id: str):
        job = job_of(job_id)

        async def stream():
            sent, shown = 0, -1
            while True:
                position = queue.position(job)
                if position is not None and position != shown:
                    shown = position
                    yield {"event": "queue", "data": json.dumps(
                        {"position": position, "html": fragment("_queue.html", position=position)})}
                while sent < len(job.events):
                    event = job.events[sent]
                    sent += 1
                    yield rendered(event, job)
                if job.finished and sent == len(job.events):
                    yield {"event": "done", "data": "{}"}
                    return
                await asyncio.sleep(POLL_SECONDS)

        return EventSourceResponse(stream())

    @app.post("/jobs/{job_id}/verdict", response_class=HTMLResponse)
    def verdict(job_id: str, verdict: str = Form(...)):
        job = job_of(job_id)
        if verdict not in VERDICTS:
            raise HTTPException(400, f"a verdict is one of {', '.join(VERDICTS)}")
        if job.answer is None or job.answer.get("sql") is None:
            raise HTTPException(409, "this question has no answer to judge yet")
        if job.verdict is not None:
            raise HTTPException(409, f"this answer was already marked {job.verdict}")
        job.verdict = verdict
        outcome: dict[str, Any] = {"enriched": False}
        if verdict == "wrong":
            message = "Recorded as wrong. The knowledge base is unchanged."
        elif job.held is None:
            message = ("Recorded as correct. The knowledge base is unchanged: only an answer that also passed "
                       "every check may teach it.")
            outcome["reason"] = "the answer did not pass every check"
        else:
            held = job.held
            result = enrich(kb_dir, held["question"], held["sql"], held["result"],
                            {**held["judgments"], "human": {"passed": True}}, evidence=held["evidence"],
                            verified_by="human")
            outcome = {"enriched": result.accepted, "version": result.version, "reasons": result.reasons}
            if result.accepted:
                message = f"Thank you. The knowledge base learnt it as version {result.version} (human-verified)."
                on_enriched()
            else:
                message = "Recorded as correct, but the knowledge base refused it: " + "; ".join(result.reasons)
        record_verdict(kb_dir, verdict, job.question, job.answer.get("sql"), answer=job.answer.get("answer"),
                       **outcome)
        return fragment("_verdict.html", message=message, verdict=verdict)

    @app.get("/kb/history", response_class=HTMLResponse)
    def kb_history(request: Request):
        entries = list(reversed(history(kb_dir)))
        return templates.TemplateResponse(request, "history.html", {"entries": entries, "kb_dir": str(kb_dir)})

    @app.get("/kb/history.json")
    def kb_history_json():
        return JSONResponse(history(kb_dir))

    return app
