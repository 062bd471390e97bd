// gen_agent chat: talks to one host over the server's AG-UI event stream; no framework.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const token = new URLSearchParams(location.hash.slice(1)).get("token") || "";
  const auth = () => (token ? { Authorization: "Bearer " + token } : {});
  const conn = $("conn"), log = $("log"), notice = $("notice");
  let task = null;        // the running turn's task id
  let bubble = null;      // the assistant message being written
  let pendingApproval = null;

  function status(state, text) { conn.dataset.state = state; conn.textContent = text; }
  function say(text) { notice.textContent = text || ""; }

  function threadOf(host) {  // one conversation per host and browser tab
    const name = "gen_agent.chat.thread." + host;
    let thread = sessionStorage.getItem(name);
    if (!thread) {
      thread = "web-" + Math.random().toString(36).slice(2, 12);
      sessionStorage.setItem(name, thread);
    }
    return thread;
  }

  async function api(path, body) {
    const response = await fetch(path, {
      method: body === undefined ? "GET" : "POST",
      headers: { ...auth(), ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error((answer.error && answer.error.message) || response.statusText);
    return answer;
  }

  function add(role, text) {
    const li = document.createElement("li");
    li.className = "msg " + role;
    const span = document.createElement("span");
    span.className = "text";
    span.textContent = text;
    li.appendChild(span);
    log.appendChild(li);
    li.scrollIntoView({ block: "end" });
    return li;
  }

  function toolBox(id, name) {
    let box = bubble.querySelector(`.tool[data-tool-id="${CSS.escape(id)}"]`);
    if (!box) {
      box = document.createElement("div");
      box.className = "tool";
      box.dataset.toolId = id;
      box.dataset.name = name || "";
      box.innerHTML = "<strong></strong> <code class=\"args\"></code><div class=\"result muted\"></div>";
      box.querySelector("strong").textContent = "tool " + (name || "");
      bubble.appendChild(box);
    }
    return box;
  }

  // One AG-UI event; true when the run ended (finished, interrupted or failed).
  function handle(ev) {
    switch (ev.type) {
      case "STATE_SNAPSHOT":
        bubble.dataset.taskState = ev.snapshot.state;
        return false;
      case "TEXT_MESSAGE_CONTENT":
        bubble.querySelector(".text").textContent += ev.delta;
        return false;
      case "TOOL_CALL_START":
        toolBox(ev.toolCallId, ev.toolCallName);
        return false;
      case "TOOL_CALL_ARGS":
        toolBox(ev.toolCallId).querySelector(".args").textContent += ev.delta;
        return false;
      case "TOOL_CALL_RESULT":
        toolBox(ev.toolCallId).querySelector(".result").textContent = "→ " + ev.content;
        return false;
      case "RUN_FINISHED": {
        const outcome = ev.outcome || { type: "success" };
        if (outcome.type === "interrupt") {
          ask(outcome.interrupts[0]);
        } else {
          bubble.dataset.state = outcome.type === "cancelled" ? "cancelled" : "done";
          finish();
        }
        return true;
      }
      case "RUN_ERROR":
        bubble.dataset.state = "error";
        say("the turn failed: " + ev.message);
        finish();
        return true;
      default:
        return false;
    }
  }

  function finish() {
    task = null;
    $("interrupt").disabled = true;
    $("send").disabled = false;
    status("idle", "ready");
  }

  function ask(interrupt) {
    pendingApproval = interrupt;
    bubble.dataset.state = "waiting";
    $("approval-text").textContent = interrupt.message || "May the agent go on?";
    $("approval-input").textContent = JSON.stringify((interrupt.metadata || {}).input || {}, null, 2);
    $("approval").hidden = false;
    status("waiting", "waiting for your answer");
    $("approve-allow").focus();
  }

  async function answer(allow) {
    const interrupt = pendingApproval;
    if (!interrupt || !task) return;
    pendingApproval = null;
    $("approval").hidden = true;
    try {
      await api(`chat/api/tasks/${task}/approvals/${encodeURIComponent(interrupt.id)}`, { allow });
      bubble.dataset.state = "streaming";
      follow(task);
    } catch (err) {
      say("the answer could not be sent: " + err.message);
    }
  }

  // Read the turn's events; reconnect from the last event id when the stream drops.
  let last = 0;
  async function follow(id) {
    for (;;) {
      let ended = false;
      status("streaming", "streaming…");
      try {
        const response = await fetch(`chat/api/tasks/${id}/events`,
          { headers: { ...auth(), "Last-Event-ID": String(last) } });
        if (!response.ok) throw new Error(response.statusText);
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const frame = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            let data = "";
            for (const line of frame.split("\n")) {
              if (line.startsWith("id: ")) last = Math.max(last, Number(line.slice(4)));
              else if (line.startsWith("data: ")) data += line.slice(6);
            }
            if (data && handle(JSON.parse(data))) ended = true;
          }
        }
      } catch (err) {
        // dropped: reconnect below
      }
      if (ended || task !== id) return;
      conn.dataset.reconnects = String(Number(conn.dataset.reconnects) + 1);
      status("reconnecting", "reconnecting…");
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
  }

  async function send(event) {
    event.preventDefault();
    const text = $("prompt").value.trim();
    const host = $("host").value;
    if (!text || !host || task) return;
    say("");
    add("user", text);
    $("prompt").value = "";
    $("send").disabled = true;
    try {
      const answer = await api(`chat/api/hosts/${encodeURIComponent(host)}/turns`,
        { thread: threadOf(host), prompt: text });
      task = answer.task;
      last = 0;
      bubble = add("assistant", "");
      bubble.dataset.state = "streaming";
      bubble.dataset.task = task;
      $("interrupt").disabled = false;
      follow(task);
    } catch (err) {
      say("not sent: " + err.message);
      $("send").disabled = false;
    }
  }

  async function interrupt() {
    if (!task) return;
    try {
      const answer = await api(`chat/api/tasks/${task}/cancel`, {});
      if (pendingApproval) {  // the run ended waiting for an answer: nothing streams now
        pendingApproval = null;
        $("approval").hidden = true;
        follow(task);
      }
      say(answer.outcome === "finished" ? "" : "interrupt sent");
    } catch (err) {
      say("the interrupt could not be sent: " + err.message);
    }
  }

  $("composer").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) send(event);
  });
  $("interrupt").addEventListener("click", interrupt);
  $("approve-allow").addEventListener("click", () => answer(true));
  $("approve-deny").addEventListener("click", () => answer(false));

  api("chat/api/hosts").then((answer) => {
    for (const name of answer.hosts) {
      const option = document.createElement("option");
      option.value = option.textContent = name;
      $("host").appendChild(option);
    }
    conn.dataset.hosts = String(answer.hosts.length);
  }).catch((err) => say("could not list the agents: " + err.message));
})();
