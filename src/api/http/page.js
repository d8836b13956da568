(function () {
  "use strict";
  var main = document.querySelector("main");
  var renderedRun = main ? main.getAttribute("data-run") : "";
  var live = document.getElementById("live");
  var reloading = false;

  function reload() {
    if (reloading) return;
    reloading = true;
    setTimeout(function () { location.reload(); }, 400);
  }
  function setText(id, text) {
    var el = document.getElementById(id);
    if (el) el.textContent = text;
  }
  function setProgress(fraction) {
    var pct = Math.max(0, Math.min(1, Number(fraction) || 0)) * 100;
    var bar = document.getElementById("progress-bar");
    if (bar) bar.style.width = pct.toFixed(1) + "%";
    setText("progress-text", pct.toFixed(0) + " %");
  }
  function setLive(text) {
    if (live) live.textContent = text;
  }

  function connect() {
    var source = new EventSource("/api/v1/events");
    source.onopen = function () { setLive("live"); };
    source.onerror = function () {
      setLive("reconnecting…");
      if (source.readyState === EventSource.CLOSED) {
        setTimeout(connect, 5000);
      }
    };
    source.addEventListener("status", function (e) {
      var status = JSON.parse(e.data);
      if ((status.current_run || "") !== renderedRun) {
        reload();
        return;
      }
      setProgress(status.progress);
      if (status.current_stage) setText("stage", status.current_stage);
    });
    source.addEventListener("stage_started", function (e) {
      setText("stage", JSON.parse(e.data).stage);
    });
    source.addEventListener("progress", function (e) {
      var p = JSON.parse(e.data);
      setProgress(p.progress);
      setText("stage", p.stage);
      if (p.message) setText("progress-message", p.message);
    });
    ["run_started", "run_finished", "stage_finished", "hardware_changed"].forEach(function (name) {
      source.addEventListener(name, reload);
    });
  }

  if (window.EventSource) connect();
})();
