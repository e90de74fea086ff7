"""A recorded session with Aria, the restaurant chat, in a real browser (Debian's chromium, driven by
Playwright): the scenario's questions asked one after the other, as a manager would.

    python -m reflect_sql.experiments.smartrestaurant.aria_session --url URL --out DIR \\
        [--question-ids 0,1,2,3,95,96,97,98] [--timeout-s 1800] [--with-evidence]

The chat must already be running (``reflect-sql aria`` or ``reflect-sql serve``). For each question:
its text is typed into the chat (its evidence too with ``--with-evidence``; a manager gives none by
default), sent, and the session waits for the answer. Recorded per question: wall seconds from send
to answer, the sentence (or the note shown instead), the final SQL, the result table, each loop
step (label, loop, decision, scores, seconds, failure), the scores and cost lines, and a screenshot
of the question's entry (``DIR/q<id>.png``). ``DIR/session.json`` (a list of records) is rewritten
after each question, so that a crash keeps the earlier ones. Every request the page makes that
leaves 127.0.0.1 is blocked and recorded (the chat serves its own script and style).

A question not answered within ``--timeout-s`` is recorded as timed out with what it showed so far,
and the session stops there: the chat answers one question at a time, so the next would wait for it.
Exit 0 when every question was answered, 1 when one timed out or failed, 2 on bad input.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from reflect_sql.experiments.smartrestaurant import QUESTIONS
from reflect_sql.files import atomic_file

DEFAULT_IDS = "0,1,2,3,95,96,97,98"
CHROMIUM = "/usr/bin/chromium"
LOCAL_HOSTS = {"127.0.0.1"}
POLL_MS = 5_000

# The answer event marks the entry `answered`; a refused post marks it `refused`; an error event
# puts a `.error` into the answer.
_FINISHED = """e => e.classList.contains('answered') || e.classList.contains('refused')
                     || !!e.querySelector('.answer .error')"""
_STEPS = """e => [...e.querySelectorAll('.step')].map(s => ({
    loop: s.dataset.loop,
    label: s.querySelector('.label')?.innerText ?? '',
    name: s.querySelector('.loop')?.innerText ?? '',
    decision: s.querySelector('.decision')?.innerText ?? '',
    scores: s.querySelector('.scores')?.innerText ?? '',
    seconds: s.querySelector('.seconds')?.innerText ?? '',
    failure: s.querySelector('.failure')?.innerText ?? '',
    running: s.classList.contains('running'),
    text: s.innerText}))"""
_ANSWER = """e => {
  const a = e.querySelector('.answer');
  const text = sel => a.querySelector(sel)?.innerText ?? null;
  const table = a.querySelector('table.result');
  return {
    sentence: text('.sentence'),
    sentence_rendered: !!a.querySelector('.sentence.rendered'),
    notes: [...a.querySelectorAll('.note')].map(n => n.innerText),
    error: text('.error'),
    sql: text('details.sql code'),
    columns: table ? [...table.querySelectorAll('th')].map(c => c.innerText) : [],
    rows: table ? [...table.querySelectorAll('tbody tr')].map(r => [...r.querySelectorAll('td')].map(c => c.innerText)) : [],
    table_text: table ? table.innerText : '',
    scores: text('p.scores'),
    cost: text('.cost'),
    answer_text: a.innerText,
    answered: e.classList.contains('answered'),
    refused: e.classList.contains('refused'),
  };
}"""
_COST = re.compile(r"(\d+) LM calls, (\d+) prompt \+ (\d+) completion tokens, ([\d.]+) s")


class BadInput(Exception):
    """A one-line error; exit 2."""


def parse_cost(line: str | None) -> dict | None:
    """The numbers of the chat's cost line ('cost: 7 LM calls, 9 prompt + 3 completion tokens, 1.2 s')."""
    m = _COST.search(line or "")
    if not m:
        return None
    return {"lm_calls": int(m[1]), "prompt_tokens": int(m[2]), "completion_tokens": int(m[3]), "seconds": float(m[4])}


def select_questions(ids: str) -> list[dict]:
    entries = {str(e["question_id"]): e for e in json.loads(QUESTIONS.read_text(encoding="utf-8"))}
    wanted = [i.strip() for i in ids.split(",") if i.strip()]
    if not wanted:
        raise BadInput("no question ids given")
    unknown = [i for i in wanted if i not in entries]
    if unknown:
        raise BadInput(f"unknown question id(s) {', '.join(unknown)} (ids are {min(map(int, entries))}-{max(map(int, entries))})")
    return [entries[i] for i in wanted]


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(f"not an http URL: {url!r}")
    if parts.hostname not in LOCAL_HOSTS:
        raise BadInput(f"the chat must be served on 127.0.0.1, not {parts.hostname}")
    url = url if url.endswith("/") else url + "/"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            page = response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise BadInput(f"the chat at {url} does not answer: {getattr(exc, 'reason', exc)}") from None
    if 'id="question"' not in page:
        raise BadInput(f"{url} is not Aria's chat (no #question field)")
    return url


def _write(out: Path, records: list[dict]) -> None:
    with atomic_file(out / "session.json") as tmp:
        tmp.write_text(json.dumps(records, ensure_ascii=False, indent=2), encoding="utf-8")


def ask(page, question: dict, out: Path, timeout_s: float, with_evidence: bool, log=print) -> dict:
    """Ask one question in the open chat page and record what its entry shows."""
    qid = question["question_id"]
    entries = page.locator(".entry")
    index = entries.count()
    page.fill("#question", question["question"])
    if with_evidence and question.get("evidence"):
        page.evaluate("() => { const d = document.querySelector('#ask details'); if (d) d.open = true; }")
        page.fill("#evidence", question["evidence"])
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S")
    start = time.monotonic()
    page.click("#send")
    entry = entries.nth(index)
    entry.wait_for(timeout=30_000)
    handle = entry.element_handle()
    finished, seen = False, 0
    deadline = start + timeout_s
    while True:
        if handle.evaluate(_FINISHED):
            finished = True
            break
        if time.monotonic() >= deadline:
            break
        steps = handle.evaluate(_STEPS)
        done = [s for s in steps if not s["running"]]
        for s in done[seen:]:
            log(f"  q{qid} {time.monotonic() - start:7.1f}s  {s['label']} {s['name']}: {s['decision']} {s['scores']}".rstrip())
        seen = max(seen, len(done))
        page.wait_for_timeout(min(POLL_MS, max(1, int((deadline - time.monotonic()) * 1000))))
    seconds = time.monotonic() - start
    answer = handle.evaluate(_ANSWER)
    steps = handle.evaluate(_STEPS)
    shot = out / f"q{qid}.png"
    # The ask form is fixed to the bottom of the window: hidden while the entry is shot, or it covers
    # the entry's last lines (the scores and the cost).
    page.evaluate("() => { document.getElementById('ask').style.visibility = 'hidden'; }")
    try:
        entry.scroll_into_view_if_needed(timeout=10_000)
        entry.screenshot(path=str(shot), timeout=60_000)
    except Exception as exc:  # a screenshot that fails must not lose the record
        log(f"  q{qid}: screenshot failed: {exc}")
        shot = None
    finally:
        page.evaluate("() => { document.getElementById('ask').style.visibility = ''; }")
    # The program's last decision (the enrichment and the sentence come after it).
    decisions = [s for s in steps if s["loop"] not in ("answer", "enrichment") and s["decision"]]
    said = [s for s in steps if s["loop"] == "answer"]
    return {
        "question_id": qid,
        "lang": question.get("lang"),
        "difficulty": question.get("difficulty"),
        "question": question["question"],
        "evidence_given": bool(with_evidence and question.get("evidence")),
        "started_at": started_at,
        "seconds": round(seconds, 2),
        "status": ("refused" if answer["refused"] else "answered" if answer["answered"]
                   else "error" if answer["error"] else "timed out" if not finished else "unknown"),
        "job": handle.evaluate("e => e.dataset.job ?? null"),
        "final_decision": decisions[-1]["decision"] if decisions else None,
        "answer_decision": said[-1]["decision"] if said else None,
        "sentence": answer["sentence"],
        "sentence_rendered": answer["sentence_rendered"],
        "notes": answer["notes"],
        "error": answer["error"],
        "sql": answer["sql"],
        "columns": answer["columns"],
        "rows": answer["rows"],
        "table_text": answer["table_text"],
        "scores": answer["scores"],
        "cost_line": answer["cost"],
        "cost": parse_cost(answer["cost"]),
        "steps": steps,
        "answer_text": answer["answer_text"],
        "screenshot": shot.name if shot else None,
        "gold_sql": question.get("SQL"),
    }


def run(url: str, out: Path, questions: list[dict], timeout_s: float, with_evidence: bool = False,
        chromium: str = CHROMIUM, log=print) -> list[dict]:
    from playwright.sync_api import sync_playwright  # a dev dependency: imported only when a session runs

    out.mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    outside: list[str] = []

    def guard(route):
        host = urlsplit(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:", "about:")) or host in LOCAL_HOSTS:
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 1000})
            page.route("**/*", guard)
            page.goto(url)
            for question in questions:
                log(f"q{question['question_id']} ({question.get('lang')}): {question['question']}")
                record = ask(page, question, out, timeout_s, with_evidence, log)
                record["requests_outside_127.0.0.1"] = list(outside)
                records.append(record)
                _write(out, records)
                log(f"q{record['question_id']}: {record['status']} in {record['seconds']:.1f} s: "
                    f"{record['sentence'] or (record['notes'] or [record['error']])[0]}")
                if record["status"] != "answered":
                    break
        finally:
            browser.close()
    if outside:
        log(f"requests that left 127.0.0.1 (blocked): {outside}")
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aria_session", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the running chat, e.g. http://127.0.0.1:8751/")
    parser.add_argument("--out", required=True, help="folder of session.json and the screenshots")
    parser.add_argument("--question-ids", default=DEFAULT_IDS, help=f"comma-separated ids (default {DEFAULT_IDS})")
    parser.add_argument("--timeout-s", type=float, default=1800, help="seconds to wait for each answer (default 1800)")
    parser.add_argument("--with-evidence", action="store_true", help="also type each question's evidence into the hints")
    parser.add_argument("--chromium", default=CHROMIUM, help=f"the browser (default {CHROMIUM})")
    args = parser.parse_args(argv)
    try:
        if args.timeout_s <= 0:
            raise BadInput("--timeout-s must be positive")
        if not Path(args.chromium).is_file():
            raise BadInput(f"no chromium at {args.chromium}")
        questions = select_questions(args.question_ids)
        url = check_url(args.url)
    except BadInput as exc:
        print(f"aria_session: error: {exc}", file=sys.stderr)
        return 2
    records = run(url, Path(args.out), questions, args.timeout_s, args.with_evidence, args.chromium,
                  log=lambda m: print(m, flush=True))
    answered = sum(r["status"] == "answered" for r in records)
    print(f"{answered}/{len(questions)} answered; {Path(args.out) / 'session.json'}", flush=True)
    return 0 if answered == len(questions) else 1


if __name__ == "__main__":
    sys.exit(main())
