// The one-time link's page: post the link back at once (a link previewer never runs this, so it
// cannot use the link up); the button does the same without scripts.
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("link-form")?.requestSubmit();
});
