// postroom dashboard: charts (uPlot) and the live view (server-sent events -> htmx "live").
(function () {
  "use strict";
  var base = document.body.dataset.base || "";
  var palette = ["#2f6fdf", "#d9534f", "#3c9d5d", "#e0a100", "#7b4fd6", "#1aa3a3", "#b5487e"];

  function draw(figure) {
    var url = base + "/api/series?pick=" + encodeURIComponent(figure.dataset.pick) +
      "&name=" + encodeURIComponent(figure.dataset.name || "");
    fetch(url, {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (data) {
      var labels = Object.keys(data.series).sort();
      var series = [{}];
      var columns = [data.t];
      labels.forEach(function (label, i) {
        series.push({label: label, stroke: palette[i % palette.length], width: 1.5});
        columns.push(data.series[label]);
      });
      var old = figure.querySelector(".uplot");
      if (old) { old.remove(); }
      var width = Math.max(figure.clientWidth - 8, 240);
      new uPlot({width: width, height: 160, series: series, axes: [{}, {size: 60}],
                 legend: {show: labels.length > 0}}, columns, figure);
      figure.dataset.drawn = String(data.t.length);
      figure.dataset.points = String(labels.reduce(function (n, label) {
        return n + data.series[label].filter(function (v) { return v !== null; }).length;
      }, 0));
    });
  }

  // A card's sparkline: the sum of the pick's series (every topic, group or queue) as one
  // small line with no axes, legend or cursor.
  function spark(figure) {
    var url = base + "/api/series?pick=" + encodeURIComponent(figure.dataset.pick);
    fetch(url, {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (data) {
      var labels = Object.keys(data.series);
      var total = data.t.map(function (_, i) {
        var sum = null;
        labels.forEach(function (label) {
          var v = data.series[label][i];
          if (v !== null && v !== undefined) { sum = (sum || 0) + v; }
        });
        return sum;
      });
      var old = figure.querySelector(".uplot");
      if (old) { old.remove(); }
      new uPlot({width: 140, height: 32, series: [{}, {stroke: palette[0], width: 1.5}],
                 axes: [{show: false}, {show: false}], legend: {show: false},
                 cursor: {show: false}, scales: {x: {time: false}}}, [data.t, total], figure);
      figure.dataset.points = String(total.filter(function (v) { return v !== null; }).length);
    });
  }

  function drawAll(root) {
    (root || document).querySelectorAll("figure.chart").forEach(draw);
    (root || document).querySelectorAll("figure.spark").forEach(spark);
  }

  document.addEventListener("DOMContentLoaded", function () { drawAll(); });
  // The live view swaps the cards in anew: draw the sparklines it brought.
  document.addEventListener("htmx:afterSettle", function () {
    document.querySelectorAll("figure.spark").forEach(function (figure) {
      if (!figure.querySelector(".uplot")) { spark(figure); }
    });
  });
  // As the tables' "every 30s": a chart moves on (a rate falling to 0) with no wake-up too.
  setInterval(function () { drawAll(); }, 30000);
  if (document.readyState !== "loading") { drawAll(); }

  var stateLabel = document.getElementById("live-state");
  var refreshes = 0;
  function connect() {
    var source = new EventSource(base + "/events");
    // Each event says whether the server listens (LISTEN/NOTIFY): "live" only then; else the
    // stream carries the sampler's ticks and the label says "polling".
    function showState(event) {
      var listening = false;
      try { listening = JSON.parse(event.data).listening === true; } catch (e) { listening = false; }
      if (stateLabel) { stateLabel.textContent = listening ? "live" : "polling"; }
    }
    source.addEventListener("hello", function (event) {
      showState(event);
      // A change between the page's render and this (re)connection sent no event to us:
      // refresh once so it is not missed until the next poll.
      document.body.dataset.connected = String(Number(document.body.dataset.connected || 0) + 1);
      htmx.trigger(document.body, "live");
    });
    source.addEventListener("refresh", function (event) {
      showState(event);
      refreshes += 1;
      document.body.dataset.refreshes = String(refreshes);
      htmx.trigger(document.body, "live");
      drawAll();
    });
    source.onerror = function () {
      // The browser reconnects by itself; meanwhile the "every 30s" trigger polls.
      if (stateLabel) { stateLabel.textContent = "polling"; }
    };
  }
  connect();
})();
