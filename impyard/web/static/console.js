// The console's one script: live parts over Server-Sent Events and elapsed times.
// Box text only ever reaches the page as text nodes (textContent); the overview's live
// fragment is HTML the server rendered with every value escaped.
"use strict";

function humanAge(seconds) {
  if (seconds < 60) return Math.floor(seconds) + "s";
  if (seconds < 3600) return Math.floor(seconds / 60) + "m" + Math.floor(seconds % 60) + "s";
  return Math.floor(seconds / 3600) + "h" + Math.floor((seconds % 3600) / 60) + "m";
}

function tickElapsed() {
  document.querySelectorAll("time.elapsed[data-since]").forEach(function (el) {
    var since = Date.parse(el.getAttribute("data-since"));
    if (!isNaN(since)) el.textContent = humanAge(Math.max(0, (Date.now() - since) / 1000));
  });
}

function followHtml(el) {
  var source = new EventSource(el.getAttribute("data-sse-html"));
  source.addEventListener("html", function (e) {
    el.innerHTML = e.data;
    tickElapsed();
  });
}

function followOutput(pre) {
  var status = document.getElementById("follow-status");
  var source = new EventSource(pre.getAttribute("data-follow"));
  source.addEventListener("reset", function () { pre.textContent = ""; });
  source.addEventListener("output", function (e) {
    pre.appendChild(document.createTextNode(e.data));
    pre.scrollTop = pre.scrollHeight;
  });
  source.addEventListener("end", function (e) {
    source.close();
    if (status) status.textContent = "The run ended: " + e.data + ". Reload for the outcome.";
  });
}

document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("[data-sse-html]").forEach(followHtml);
  document.querySelectorAll("pre[data-follow]").forEach(followOutput);
  tickElapsed();
  setInterval(tickElapsed, 1000);
});
