// Sign-in with a browser wallet (EIP-1193): the server's SIGN-IN-WITH-X challenge, signed with
// personal_sign, goes back to the server, which sets the session cookie.
import { postJson } from "./lib/http.js";

function utf8Hex(text) {
  return "0x" + Array.from(new TextEncoder().encode(text), (b) => b.toString(16).padStart(2, "0")).join("");
}

async function signIn(status) {
  const provider = window.ethereum;
  if (!provider) {
    status.textContent = "No browser wallet found. Use `engram console` instead (below).";
    return;
  }
  status.textContent = "Waiting for the wallet…";
  const [address] = await provider.request({ method: "eth_requestAccounts" });
  const { challenge, message } = await postJson("/console/auth/challenge", { address });
  const signature = await provider.request({
    method: "personal_sign",
    params: [utf8Hex(message), address],
  });
  const done = await postJson("/console/auth/signin", { challenge, address, signature });
  status.textContent = "Signed in.";
  window.location.assign(done.next);
}

document.addEventListener("DOMContentLoaded", () => {
  const button = document.getElementById("connect");
  const status = document.getElementById("status");
  button?.addEventListener("click", () => {
    signIn(status).catch((error) => {
      status.textContent = `Sign-in failed: ${error.message}`;
    });
  });
});
