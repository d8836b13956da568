// The pages' live part. The server renders everything readable; this script adds the
// charts (uPlot, embedded in the agent) and keeps the status page current from the
// event stream: `train` and `telemetry` events extend the charts, `status` and run
// events refresh the rest. After a reconnect it re-reads /api/v1/live and the status,
// so nothing missed while the agent was away is left out.
(function () {
  "use strict";
  var main = document.querySelector("main");
  if (!main) return;
  var page = main.getAttribute("data-page");
  var renderedRun = main.getAttribute("data-run") || "";
  var chartsBox = document.getElementById("charts");
  var palette = ["#2f6fde", "#d9480f", "#2b8a3e", "#ae3ec9", "#e8590c", "#0c8599", "#5f3dc4", "#868e96"];
  // What tests and operators can read: each chart, and what its updates cost.
  var stats = { charts: {}, updates: 0, setDataMs: 0, lastSetDataMs: 0, reconnects: 0, liveLoads: 0, statusLoads: 0 };
  window.tinyperf = stats;

  function setText(id, text) {
    var el = document.getElementById(id);
    if (el) el.textContent = text;
  }
  function duration(seconds) {
    if (!isFinite(seconds) || seconds < 0) return "—";
    if (seconds < 60) return seconds.toFixed(1) + " s";
    var t = Math.round(seconds), h = Math.floor(t / 3600), m = Math.floor(t / 60) % 60, s = t % 60;
    if (h > 0) return h + " h " + (m < 10 ? "0" : "") + m + " min";
    return m + " min " + (s < 10 ? "0" : "") + s + " s";
  }

  // A chart: a title, an x label and named series, drawn by uPlot when it is here.
  function Chart(key, title, unit, xLabel) {
    this.key = key;
    this.title = title;
    this.unit = unit;
    this.xLabel = xLabel;
    this.labels = [];
    this.data = [[]];
    this.plot = null;
    this.dirty = false;
    stats.charts[key] = this;
  }
  Chart.prototype.series = function (label) {
    var i = this.labels.indexOf(label);
    if (i >= 0) return i + 1;
    this.labels.push(label);
    var column = [];
    for (var k = 0; k < this.data[0].length; k++) column.push(null);
    this.data.push(column);
    if (this.plot) { this.plot.destroy(); this.plot = null; }
    return this.labels.length;
  };
  // Adds one x with the given {label: value}; an x equal to the last one fills it in.
  Chart.prototype.add = function (x, values) {
    var xs = this.data[0];
    var row = xs.length - 1;
    if (row < 0 || xs[row] !== x) {
      xs.push(x);
      for (var c = 1; c < this.data.length; c++) this.data[c].push(null);
      row = xs.length - 1;
    }
    for (var label in values) {
      if (values[label] === null || values[label] === undefined) continue;
      var col = this.series(label);
      this.data[col][row] = values[label];
    }
    this.dirty = true;
  };
  Chart.prototype.reset = function () {
    this.labels = [];
    this.data = [[]];
    if (this.plot) { this.plot.destroy(); this.plot = null; }
    this.dirty = true;
  };
  Chart.prototype.points = function () { return this.data[0].length; };
  Chart.prototype.draw = function () {
    if (!window.uPlot || !chartsBox || !this.dirty) return;
    this.dirty = false;
    if (!this.data[0].length) return;
    if (!this.plot) {
      var holder = document.getElementById("chart-" + this.key);
      if (!holder) {
        holder = document.createElement("div");
        holder.className = "chart";
        holder.id = "chart-" + this.key;
        var h = document.createElement("h3");
        h.textContent = this.title + (this.unit ? " (" + this.unit + ")" : "");
        holder.appendChild(h);
        chartsBox.appendChild(holder);
      }
      var series = [{ label: this.xLabel }];
      for (var i = 0; i < this.labels.length; i++) {
        series.push({ label: this.labels[i], stroke: palette[i % palette.length], width: 1.5, spanGaps: true });
      }
      var width = Math.max(280, Math.min(holder.clientWidth || 480, 640));
      this.plot = new window.uPlot({
        width: width,
        height: 200,
        scales: { x: { time: false } },
        series: series,
        axes: [{ label: this.xLabel }, { label: this.unit }],
        legend: { live: true },
      }, this.data, holder);
      document.body.classList.add("charted");
      return;
    }
    // batch() draws at once instead of on the next microtask, so the time taken is
    // the whole update's.
    var data = this.data;
    var started = performance.now();
    this.plot.batch(function (u) { u.setData(data); });
    var spent = performance.now() - started;
    stats.updates += 1;
    stats.setDataMs += spent;
    stats.lastSetDataMs = spent;
  };

  var charts = [];
  function drawAll() { charts.forEach(function (c) { c.draw(); }); }

  // ---- the run page: its series come with the page ----
  if (page === "run") {
    if (!chartsBox) return;
    var given = [];
    try { given = JSON.parse(chartsBox.getAttribute("data-series") || "[]"); } catch (e) { given = []; }
    given.forEach(function (g, n) {
      var chart = new Chart("run" + n, g.title, g.unit, g.x_label);
      g.labels.forEach(function (label) { chart.series(label); });
      chart.data = [g.x].concat(g.ys);
      chart.dirty = true;
      charts.push(chart);
    });
    drawAll();
    return;
  }

  // ---- the status page ----
  var throughput = new Chart("throughput", "throughput", "img/s", "step");
  var loss = new Chart("loss", "loss", "", "step");
  var top1 = new Chart("top1", "top-1", "", "step");
  var lr = new Chart("lr", "learning rate", "", "step");
  var power = new Chart("power", "power", "W", "s");
  var temp = new Chart("temp", "temperature", "°C", "s");
  var clock = new Chart("clock", "SM clock", "MHz", "s");
  var util = new Chart("util", "utilisation", "%", "s");
  charts = [throughput, loss, top1, lr, power, temp, clock, util];
  var liveRun = null;

  function addTrain(p) {
    var x = p.global_step;
    throughput.add(x, { "img/s": p.images_per_s });
    loss.add(x, { loss: p.loss });
    var acc = { train: p.accuracy };
    if (p.eval_accuracy !== undefined && p.eval_accuracy !== null) acc.eval = p.eval_accuracy;
    top1.add(x, acc);
    lr.add(x, { lr: p.lr });
    setText("epoch", p.planned_epochs > 0 ? p.epoch + " of " + p.planned_epochs : String(p.epoch));
    setText("elapsed", duration(p.elapsed_s));
    if (p.global_step > 0 && p.planned_steps > p.global_step) {
      var rate = p.global_step / Math.max(p.elapsed_s, 1e-9);
      setText("eta", "≈ " + duration((p.planned_steps - p.global_step) / rate));
    }
  }
  function gpuTemp(g) {
    var ts = g.temperatures || [];
    for (var want of ["edge", "gpu"]) {
      for (var i = 0; i < ts.length; i++) if (ts[i].label === want) return ts[i].celsius;
    }
    return ts.length ? ts[0].celsius : null;
  }
  function addSample(s) {
    var p = {}, t = {}, c = {}, u = {};
    (s.gpus || []).forEach(function (g) {
      var name = "gpu" + g.index;
      p[name] = g.power_w; t[name] = gpuTemp(g); c[name] = g.sm_clock_mhz; u[name] = g.util_percent;
      var tile = g.address && document.querySelector('.tile[data-address="' + g.address + '"]');
      if (tile) {
        var pw = tile.querySelector(".tile-power"), tc = tile.querySelector(".tile-temp");
        if (pw && g.power_w !== null && g.power_w !== undefined) pw.textContent = g.power_w.toFixed(0) + " W";
        var deg = gpuTemp(g);
        if (tc && deg !== null && deg !== undefined) tc.textContent = deg.toFixed(0) + " °C";
      }
    });
    power.add(s.t_s, p); temp.add(s.t_s, t); clock.add(s.t_s, c); util.add(s.t_s, u);
  }
  function resetAll() { charts.forEach(function (c) { c.reset(); }); }

  // Redraws at most twice a second, whatever the event rate.
  var drawPending = false;
  function scheduleDraw() {
    if (drawPending) return;
    drawPending = true;
    setTimeout(function () { drawPending = false; drawAll(); }, 500);
  }

  function getJson(path) {
    return fetch(path, { cache: "no-store" }).then(function (r) {
      if (!r.ok) throw new Error(path + ": " + r.status);
      return r.json();
    });
  }
  function loadLive() {
    return getJson("/api/v1/live").then(function (live) {
      resetAll();
      stats.liveLoads += 1;
      liveRun = live.run_id || null;
      (live.train || []).forEach(addTrain);
      (live.telemetry || []).forEach(addSample);
      drawAll();
    }).catch(function () { setText("live", "cannot read /api/v1/live"); });
  }
  function applyStatus(status) {
    if ((status.current_run || "") !== renderedRun) { reload(); return; }
    var bar = document.getElementById("progress-bar");
    var pct = Math.max(0, Math.min(1, Number(status.progress) || 0)) * 100;
    if (bar) bar.value = pct;
    setText("progress-text", pct.toFixed(0) + " %");
    if (status.current_stage) setText("stage", status.current_stage);
    if (status.message) setText("progress-message", status.message);
  }
  var reloading = false;
  function reload() {
    if (reloading) return;
    reloading = true;
    setTimeout(function () { location.reload(); }, 400);
  }

  // As the server writes sizes: 1024-based, one decimal unless whole.
  function bytesText(n) {
    var units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], u = 0;
    while (Math.abs(n) >= 1024 && u + 1 < units.length) { n /= 1024; u += 1; }
    return (u === 0 || n % 1 === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[u];
  }
  // An OS update's bytes: from the `update` event where the agent sends one, else
  // asked for every few seconds while the page shows one under way. The page is
  // rendered again when the update's state moves on.
  var updateBox = document.getElementById("os-update");
  var updateShown = updateBox ? updateBox.getAttribute("data-state") : "idle";
  if (updateShown === "available") updateShown = "idle";
  function applyUpdate(u) {
    u = u || {};
    if ((u.state || "idle") !== updateShown) { reload(); return; }
    if (!(u.total_bytes > 0)) return;
    var done = Math.min(u.done_bytes || 0, u.total_bytes);
    var bar = document.getElementById("os-update-bar");
    if (bar) { bar.max = u.total_bytes; bar.value = done; }
    if (u.state === "downloading") {
      setText("os-update-text", "Downloading OS " + (u.version || "a new version") + ": " + bytesText(done) +
        " of " + bytesText(u.total_bytes) + " (" + (100 * done / u.total_bytes).toFixed(0) + " %).");
    }
  }
  function watchUpdate() {
    if (updateShown !== "downloading" && updateShown !== "checking") return;
    setTimeout(function () {
      getJson("/api/v1/image").then(function (image) {
        applyUpdate(image.update);
        watchUpdate();
      }).catch(function () { watchUpdate(); });
    }, 3000);
  }

  loadLive();
  watchUpdate();
  if (!window.EventSource) return;
  var lostContact = false;
  function connect() {
    var source = new EventSource("/api/v1/events");
    source.onopen = function () {
      setText("live", "live");
      if (lostContact) {
        // Back after an agent restart or a dropped stream: catch up on what was missed.
        lostContact = false;
        stats.reconnects += 1;
        loadLive();
        getJson("/api/v1/status").then(function (status) {
          stats.statusLoads += 1;
          applyStatus(status);
        }).catch(function () {});
      }
    };
    source.onerror = function () {
      lostContact = true;
      setText("live", "reconnecting…");
      if (source.readyState === EventSource.CLOSED) setTimeout(connect, 5000);
    };
    source.addEventListener("status", function (e) { applyStatus(JSON.parse(e.data)); });
    source.addEventListener("stage_started", function (e) { setText("stage", JSON.parse(e.data).stage); });
    source.addEventListener("progress", function (e) {
      var p = JSON.parse(e.data);
      var bar = document.getElementById("progress-bar");
      var pct = Math.max(0, Math.min(1, Number(p.progress) || 0)) * 100;
      if (bar) bar.value = pct;
      setText("progress-text", pct.toFixed(0) + " %");
      setText("stage", p.stage);
      if (p.message) setText("progress-message", p.message);
    });
    source.addEventListener("train", function (e) {
      var ev = JSON.parse(e.data);
      if (ev.run_id !== liveRun) { resetAll(); liveRun = ev.run_id; }
      addTrain(ev.point);
      scheduleDraw();
    });
    source.addEventListener("telemetry", function (e) {
      var ev = JSON.parse(e.data);
      if (ev.run_id !== liveRun) { resetAll(); liveRun = ev.run_id; }
      addSample(ev);
      scheduleDraw();
    });
    source.addEventListener("update", function (e) { applyUpdate(JSON.parse(e.data)); });
    ["run_started", "run_finished", "stage_finished", "hardware_changed"].forEach(function (name) {
      source.addEventListener(name, reload);
    });
  }
  connect();
})();
