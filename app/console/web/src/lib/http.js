// JSON to the console's own endpoints (same origin), with the page's CSRF token when it has one.
export async function postJson(path, body) {
  const token = document.querySelector('meta[name="csrf-token"]')?.content;
  const headers = { "content-type": "application/json", accept: "application/json" };
  if (token) headers["x-csrf-token"] = token;
  const response = await fetch(path, {
    method: "POST",
    headers,
    body: JSON.stringify(body),
    credentials: "same-origin",
  });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    throw new Error(answer?.error?.message || `${response.status} ${response.statusText}`);
  }
  return answer;
}

// Data a page carries for its scripts: a <script type="application/json"> block (never run).
export function pageData(id) {
  const node = document.getElementById(id);
  return node ? JSON.parse(node.textContent) : null;
}
