// A new agent key, signed by the owner's browser wallet (EIP-1193 personal_sign) over the
// delegation text the server composes; then registered. Without a browser wallet the page says
// how to do it from the command line.
import { postJson } from "./lib/http.js";

function utf8Hex(text) {
  return "0x" + Array.from(new TextEncoder().encode(text), (b) => b.toString(16).padStart(2, "0")).join("");
}

function draftOf(form) {
  const data = new FormData(form);
  const namespaces = String(data.get("namespaces") || "").split(",").map((s) => s.trim()).filter(Boolean);
  return {
    agent: String(data.get("agent") || "").trim(),
    scopes: data.getAll("scopes").map(String),
    namespaces: namespaces.length ? namespaces : null,
    expires_at: String(data.get("expires_at") || "").trim() || null,
  };
}

async function addAgent(form, status, owner) {
  if (!window.ethereum) {
    status.textContent = "Signing an agent key needs a browser wallet here; or run `engram wallet delegate` and POST its output to /v1/agents.";
    return;
  }
  const draft = draftOf(form);
  const { message, nonce, issued_at } = await postJson("/console/team/agents/message", draft);
  status.textContent = "Waiting for the wallet…";
  const signature = await window.ethereum.request({ method: "personal_sign", params: [utf8Hex(message), owner] });
  await postJson("/console/team/agents", { ...draft, nonce, issued_at, signature });
  window.location.reload();
}

document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("agent-form");
  const status = document.getElementById("agent-status");
  if (!form) return;
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    addAgent(form, status, form.dataset.owner).catch((error) => {
      status.textContent = `Not added: ${error.message}`;
    });
  });
});
