// The participant's rating page: Label Studio's editor (window.LabelStudio, from main.js) on the
// labeling config and the episode in the page's JSON block, sending the rating to the gateway.
// No inline script anywhere: the page's Content-Security-Policy allows scripts from here only.
(function () {
  "use strict";
  var boot = JSON.parse(document.getElementById("boot").textContent);
  var notice = document.getElementById("notice");
  // One request at a time: the editor lets a second click through after 500 ms (as "Update").
  var sending = false;

  function show(lines) {
    notice.textContent = "";
    lines.forEach(function (line) {
      var item = document.createElement("p");
      item.textContent = line;
      notice.appendChild(item);
    });
    notice.hidden = lines.length === 0;
    if (lines.length) notice.scrollIntoView({ block: "center" });
  }

  function refused(body) {
    if (body && body.problems) return ["Please complete your rating:"].concat(body.problems);
    return [(body && body.error) || "Your rating could not be saved. Please try again."];
  }

  function send(annotation) {
    if (sending) return;
    sending = true;
    show([]);
    fetch(boot.submit, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": boot.csrf },
      body: JSON.stringify({ assignment: boot.assignment, results: annotation.serializeAnnotation() }),
    })
      .then(function (response) {
        return response.json().then(function (body) { return { ok: response.ok, body: body }; });
      })
      .then(function (answer) {
        if (answer.ok) {
          window.location.assign(answer.body.next);
          return;
        }
        sending = false;
        show(refused(answer.body));
      })
      .catch(function () {
        sending = false;
        show(["Your rating could not be sent: check your connection and submit again."]);
      });
  }

  new LabelStudio(document.getElementById("label-studio"), {
    config: boot.config,
    task: { id: boot.task.id, data: boot.task.data, annotations: [], predictions: [] },
    // The form and its Submit button only: no annotation list, no other work, no navigation.
    interfaces: ["topbar", "controls"],
    settings: boot.settings,
    user: { pk: 1, firstName: "Participant" },
    onLabelStudioLoad: function (LS) {
      var annotation = LS.annotationStore.addAnnotation({ userGenerate: true });
      LS.annotationStore.selectAnnotation(annotation.id);
    },
    onSubmitAnnotation: function (LS, annotation) { send(annotation); },
    onUpdateAnnotation: function (LS, annotation) { send(annotation); },
  });
})();
