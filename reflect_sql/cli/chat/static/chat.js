// Aria's chat: post a question, follow its server-sent event stream, insert the HTML the server
// rendered. Every fragment is rendered and escaped by the server's templates.
"use strict";

const conversation = document.getElementById("conversation");
const form = document.getElementById("ask");
const entryTemplate = document.getElementById("entry");

function follow(jobId, entry) {
  const steps = entry.querySelector(".steps");
  const queue = entry.querySelector(".queue");
  const answer = entry.querySelector(".answer");
  const source = new EventSource(`jobs/${jobId}/events`);
  source.addEventListener("queue", (e) => { queue.innerHTML = JSON.parse(e.data).html; });
  source.addEventListener("step", (e) => {
    const data = JSON.parse(e.data);
    const existing = steps.children[data.index];
    if (existing) existing.outerHTML = data.html; else steps.insertAdjacentHTML("beforeend", data.html);
  });
  source.addEventListener("answer", (e) => {
    const data = JSON.parse(e.data);
    steps.innerHTML = data.steps.join("");
    answer.innerHTML = data.html;
    queue.textContent = "";
    entry.classList.add("answered");
  });
  source.addEventListener("error", (e) => {
    if (e.data) { answer.innerHTML = JSON.parse(e.data).html; queue.textContent = ""; }
  });
  // The stream ends itself; closing here keeps the browser from reconnecting to a finished question.
  source.addEventListener("done", () => source.close());
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = new FormData(form);
  const entry = entryTemplate.content.firstElementChild.cloneNode(true);
  entry.querySelector(".question").textContent = body.get("question");
  conversation.appendChild(entry);
  const response = await fetch("ask", { method: "POST", body });
  if (!response.ok) {
    const detail = (await response.json()).detail;
    entry.querySelector(".answer").textContent = detail;
    entry.classList.add("refused");
    return;
  }
  const { job } = await response.json();
  entry.dataset.job = job;
  form.reset();
  follow(job, entry);
});

conversation.addEventListener("submit", async (event) => {
  const verdictForm = event.target.closest("form.verdict");
  if (!verdictForm) return;
  event.preventDefault();
  const body = new FormData();
  body.set("verdict", event.submitter.value);
  verdictForm.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  const response = await fetch(verdictForm.getAttribute("action"), { method: "POST", body });
  const text = response.ok ? await response.text() : `<p class="error">${(await response.json()).detail}</p>`;
  verdictForm.insertAdjacentHTML("afterend", text);
});
