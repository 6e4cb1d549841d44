// The researcher dashboard: reads its figures every few seconds and fills the tables in.
// Text only (textContent): participant ids and flag details never become markup.
(function () {
  "use strict";
  var POLL_MS = 3000;
  var root = document.getElementById("dashboard");
  var address = root.getAttribute("data-figures");
  var PROGRESS = [
    ["episodes", "Episodes"], ["episodes_done", "Episodes complete"],
    ["episodes_in_progress", "Episodes in progress"], ["episodes_open", "Episodes open"],
    ["slots_open", "Slots open"], ["slots_leased", "Slots leased"],
    ["slots_waiting", "Slots rated, waiting to be saved"], ["slots_saved", "Slots rated and saved"],
    ["saves_waiting", "Saves waiting"], ["saves_failed", "Saves refused by Label Studio"],
    ["median_minutes", "Median minutes per episode"]
  ];

  function shown(value, digits) {
    if (value === null || value === undefined) { return "–"; }
    return typeof value === "number" && digits !== undefined ? value.toFixed(digits) : String(value);
  }

  function interval(low, high) {
    return low === null || high === null ? "–" : shown(low, 3) + " to " + shown(high, 3);
  }

  function row(cells, attributes) {
    var tr = document.createElement("tr");
    Object.keys(attributes || {}).forEach(function (name) { tr.setAttribute(name, attributes[name]); });
    cells.forEach(function (cell) {
      var td = document.createElement(cell.header ? "th" : "td");
      td.textContent = cell.text;
      if (cell.figure) { td.setAttribute("data-figure", cell.figure); td.className = "number"; }
      tr.appendChild(td);
    });
    return tr;
  }

  function fill(id, rows) {
    var body = document.getElementById(id);
    body.replaceChildren.apply(body, rows);
  }

  function show(data) {
    var progress = data.progress || {};
    fill("progress", PROGRESS.map(function (item) {
      return row([{text: item[1], header: true}, {text: shown(progress[item[0]]), figure: item[0]}]);
    }));
    var agreement = data.agreement;
    document.getElementById("agreement-note").textContent = agreement
      ? "On " + agreement.ratings + " ratings (gold episodes left out), computed " +
        new Date(agreement.computed_at).toLocaleTimeString() + "; 95% bootstrap intervals."
      : data.agreement_unavailable || "Not computed yet.";
    fill("agreement", (agreement ? agreement.dimensions : []).map(function (d) {
      return row([
        {text: d.label, header: true},
        {text: shown(d.alpha, 3), figure: "alpha"},
        {text: interval(d.alpha_low, d.alpha_high), figure: "alpha_interval"},
        {text: shown(d.ac, 3), figure: "ac"},
        {text: interval(d.ac_low, d.ac_high), figure: "ac_interval"},
        {text: shown(d.pairs), figure: "pairs"}
      ], {"data-key": d.key});
    }));
    fill("alt-test", (agreement ? agreement.dimensions : []).flatMap(function (d) {
      return (d.alt_test || []).map(function (t) {
        return row([
          {text: d.label, header: true}, {text: t.evaluator || "(unnamed judge)"},
          {text: shown(t.winning_rate, 2), figure: "winning_rate"},
          {text: shown(t.advantage_probability, 2), figure: "advantage_probability"},
          {text: t.verdict}, {text: shown(t.items), figure: "items"},
          {text: shown(t.third_raters_needed), figure: "third_raters_needed"}
        ], {"data-key": d.key, "data-judge": t.evaluator});
      });
    }));
    if (agreement && agreement.models_unavailable) {
      document.getElementById("models-note").textContent = agreement.models_unavailable;
    }
    fill("models", (agreement ? agreement.models : []).map(function (m) {
      return row([
        {text: m.agent_model, header: true}, {text: m.dimension}, {text: m.estimate},
        {text: m.evaluator}, {text: shown(m.mean, 2), figure: "mean"},
        {text: interval(m.mean_ci_low, m.mean_ci_high), figure: "mean_interval"},
        {text: shown(m.n), figure: "n"}, {text: shown(m.effective_n, 1), figure: "effective_n"}
      ], {"data-model": m.agent_model, "data-key": m.dimension});
    }));
    fill("participants", data.participants.map(function (p) {
      return row([
        {text: p.participant}, {text: p.outcome}, {text: shown(p.episodes)},
        {text: shown(p.gold_episodes)}, {text: shown(p.median_minutes)},
        {text: p.flags || "none"}, {text: p.suggested}
      ]);
    }));
    document.getElementById("updated").textContent = data.updated_at
      ? "updated " + new Date(data.updated_at).toLocaleTimeString() : "";
  }

  function poll() {
    fetch(address, {credentials: "same-origin", cache: "no-store"})
      .then(function (answer) { return answer.ok ? answer.json() : null; })
      .then(function (data) { if (data) { show(data); } })
      .catch(function () { /* the next poll tries again */ })
      .then(function () { setTimeout(poll, POLL_MS); });
  }

  poll();
})();
