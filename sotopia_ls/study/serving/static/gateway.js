// The participant's rating page: Label Studio's own editor (editor-loader.js loads it) on the
// labeling config and the episode in the page's JSON block, sending the rating to the gateway
// with how each rationale came in: characters pasted (or dropped) in and characters typed, and
// the seconds the page was visible and focused (time on task; nothing typed is read for it).
// No inline script anywhere: the page's Content-Security-Policy allows scripts from here only.
(function () {
  "use strict";
  var boot = JSON.parse(document.getElementById("boot").textContent);
  var release = JSON.parse(document.getElementById("editor-loader").textContent).release;
  var notice = document.getElementById("notice");
  // One request at a time: the editor lets a second click through after 500 ms (as "Update").
  var sending = false;
  var root = document.getElementById("label-studio");
  var TEXT = "textarea, input[type=text]";
  var SUBMIT = "button[name=submit]";
  // The kinds of insertion that bring text from elsewhere; any other is typed.
  var PASTED = {
    insertFromPaste: 1, insertFromPasteAsQuotation: 1, insertFromDrop: 1, insertFromYank: 1,
  };
  // Rationale field → { pasted, typed }: characters inserted, so text deleted later counts too.
  var typing = {};
  // Label Studio's TextArea is a text box named after its control until its text is taken as
  // the control's value (Shift+Enter, or a submit); that text is then edited in a box named
  // "<control>:<region id>" in the same place. So every element holding one field's boxes
  // stands for that field ("" for an element holding several).
  var holders = new WeakMap();
  // The box's length and selected length as an insertion begins: the insertion's length is
  // what the box grew by, one rule for every kind (a drop's text is not in the event's data).
  var before = null;

  function learnFields() {
    root.querySelectorAll("textarea[name], input[type=text][name]").forEach(function (box) {
      var field = box.name.split(":")[0];
      for (var node = box; node && node !== root; node = node.parentElement) {
        var known = holders.get(node);
        holders.set(node, known === undefined || known === field ? field : "");
      }
    });
  }

  function fieldOf(box) {
    for (var node = box; node && node !== root; node = node.parentElement) {
      if (holders.has(node)) return holders.get(node);
    }
    return "";
  }

  function count(box, kind, characters) {
    var field = fieldOf(box);
    if (characters <= 0 || boot.typing.fields.indexOf(field) < 0) return;
    var counted = typing[field] || (typing[field] = { pasted: 0, typed: 0 });
    counted[kind] = Math.min(boot.typing.most, counted[kind] + characters);
  }

  function isText(target) {
    return target instanceof Element && target.matches(TEXT) && root.contains(target);
  }

  // Every box is focused before anything is put in it: learn the boxes shown then.
  document.addEventListener("focusin", function (event) {
    if (isText(event.target)) learnFields();
  }, true);
  document.addEventListener("beforeinput", function (event) {
    var box = event.target;
    before = isText(box)
      ? { box: box, length: box.value.length, selected: box.selectionEnd - box.selectionStart }
      : null;
  }, true);
  document.addEventListener("input", function (event) {
    var start = before, kind = event.inputType || "";
    before = null;
    // A composition (an input method) is counted once, as it ends, not at each of its steps.
    if (!start || start.box !== event.target || kind.indexOf("insert") !== 0 ||
        kind === "insertCompositionText") return;
    count(start.box, PASTED[kind] ? "pasted" : "typed",
          start.box.value.length - (start.length - start.selected));
  }, true);
  document.addEventListener("compositionend", function (event) {
    if (isText(event.target)) count(event.target, "typed", (event.data || "").length);
  }, true);

  // Time on task: seconds while the tab is shown and its window has the focus, counted from the
  // episode's start; kept in the tab's session storage, so a reload of the episode adds to them.
  var visibleKey, visibleBefore, visibleSince = null;

  function countVisibleFrom(assignment) {
    visibleKey = "sotopia-visible-seconds:" + assignment;
    visibleBefore = Math.max(0, Number(stored(function (storage) {
      return storage.getItem(visibleKey);
    })) || 0);
    visibleSince = null;
  }

  // Session storage, when the browser allows it (else a reload starts the count again).
  function stored(use) {
    try {
      return use(window.sessionStorage);
    } catch (error) {
      return null;
    }
  }

  function visibleSeconds() {
    var running = visibleSince === null ? 0 : (performance.now() - visibleSince) / 1000;
    return Math.min(boot.visible.most, visibleBefore + running);
  }

  function watchVisible() {
    visibleBefore = visibleSeconds();
    var onTask = document.visibilityState === "visible" && document.hasFocus();
    visibleSince = onTask ? performance.now() : null;
    stored(function (storage) { storage.setItem(visibleKey, String(visibleBefore)); });
  }

  document.addEventListener("visibilitychange", watchVisible);
  ["focus", "blur", "pagehide"].forEach(function (name) {
    window.addEventListener(name, watchVisible);
  });
  countVisibleFrom(boot.assignment);
  watchVisible();

  // The notice is a row of the bar at the top of the window (gateway.css); the episode column
  // sticks below the bar, whatever its height.
  var bar = document.querySelector(".study-bar");
  new ResizeObserver(function () {
    document.documentElement.style.setProperty("--bar", bar.offsetHeight + "px");
  }).observe(bar);

  function show(lines) {
    notice.textContent = "";
    lines.forEach(function (line) {
      var item = document.createElement("p");
      item.textContent = line;
      notice.appendChild(item);
    });
    notice.hidden = lines.length === 0;
  }

  // Submit pressed too early: the page names what is still missing and goes to the first of
  // it. The editor's own check would name one field in a dialog and leave the form where it
  // was; a rationale of spaces would pass it and come back from the gateway.
  var editor = null;
  var MOST_NAMED = 4;
  // How long to wait before sending a rating again after a 503 that named no wait.
  var RETRY_SECONDS = 2;

  function given(result) {
    var value = result.value || {};
    return (value.choices || []).length > 0 || (value.text || []).some(function (text) {
      return String(text).trim() !== "";
    });
  }

  function missing() {
    var annotation = editor && editor.annotationStore.selected;
    if (!annotation) return [];
    var done = {};
    annotation.serializeAnnotation().forEach(function (result) {
      if (given(result)) done[result.from_name] = true;
    });
    return boot.required.filter(function (field) {
      if (done[field.name]) return false;
      var box = field.text && root.querySelector(field.anchor);
      return !box || box.value.trim() === "";
    });
  }

  // A list of what is missing goes once nothing is; any other notice stays until the next send.
  var listed = false;

  function recheck() {
    if (listed && !missing().length) {
      listed = false;
      show([]);
    }
  }

  ["input", "change"].forEach(function (name) { root.addEventListener(name, recheck); });

  // The missing answer's dimension goes to the top of the window, just below the bar and its
  // notice: its heading and guidance are read above the answer.
  var DIMENSION = ".sotopia-dimension";

  function goTo(field) {
    var place = root.querySelector(field.anchor);
    if (!place) return;
    var dimension = place.closest(DIMENSION) || place;
    window.scrollBy(0, dimension.getBoundingClientRect().top - bar.offsetHeight - 8);
    var control = place.matches(TEXT) ? place : place.querySelector("input");
    if (control) control.focus({ preventScroll: true });
  }

  // The episode column scrolls on its own beside the form. As the participant goes down the
  // form it goes down with it, in proportion, so the last dimension is rated beside the last
  // turn of the dialogue; it never goes back up by itself, so a participant who scrolled it
  // to read on does not lose their place.
  var EPISODE = ".sotopia-episode";
  window.addEventListener("scroll", function () {
    var episode = root.querySelector(EPISODE);
    var page = document.scrollingElement;
    var range = page.scrollHeight - page.clientHeight;
    if (!episode || range <= 0) return;
    var wanted = (page.scrollTop / range) * (episode.scrollHeight - episode.clientHeight);
    if (wanted > episode.scrollTop) episode.scrollTop = wanted;
  }, { passive: true });

  document.addEventListener("click", function (event) {
    if (!(event.target instanceof Element) || !event.target.closest(SUBMIT)) return;
    if (sending) {  // the rating is being saved: a second press sends nothing
      event.preventDefault();
      event.stopImmediatePropagation();
      return;
    }
    var left = missing();
    if (!left.length) return;
    event.preventDefault();
    event.stopImmediatePropagation();
    var named = left.slice(0, MOST_NAMED).map(function (field) { return field.message; });
    if (left.length > MOST_NAMED) named.push("… and " + (left.length - MOST_NAMED) + " more.");
    show([left.length === 1 ? "One answer is still missing:" :
          left.length + " answers are still missing:"].concat(named));
    listed = true;
    goTo(left[0]);
  }, true);

  function refused(body) {
    if (body && body.problems) return ["Please complete your rating:"].concat(body.problems);
    return [(body && body.error) || "Your rating could not be saved. Please try again."];
  }

  // The editor draws its Submit button again when the page's layout changes (a notice shown):
  // while a rating is being sent, each new drawing is disabled too.
  function disableSubmit(on) {
    var button = root.querySelector(SUBMIT);
    if (button && button.disabled !== on) button.disabled = on;
  }

  new MutationObserver(function () {
    if (sending) disableSubmit(true);
  }).observe(root, { subtree: true, childList: true, attributes: true,
                     attributeFilter: ["disabled"] });

  // While a rating is being saved the page says so and its Submit button stays disabled;
  // any other notice replaces this one.
  function saving(on) {
    disableSubmit(on);
    show(on ? ["Saving your rating…"] : []);
    notice.classList.toggle("saving", on);
  }

  function stopSaving(lines) {
    sending = false;
    saving(false);
    show(lines);
  }

  // A gateway too busy for the rating answers 503 with Retry-After: the same rating goes again
  // after that many seconds (the gateway records an assignment's rating once, however often
  // it is sent), and the participant sees it being saved, not an error.
  function post(body) {
    fetch(boot.submit, {
      method: "POST",
      credentials: "same-origin",
      // The next episode is asked to come in the answer: this page keeps its editor.
      headers: { "Content-Type": "application/json", "X-CSRF-Token": boot.csrf,
                 "X-Next-In-Place": "1" },
      body: body,
    })
      .then(function (response) {
        if (response.status === 503) {
          var seconds = Number(response.headers.get("Retry-After")) || RETRY_SECONDS;
          setTimeout(function () { post(body); }, seconds * 1000);
          return null;
        }
        return response.json().then(function (read) { return { ok: response.ok, body: read }; });
      })
      .then(function (answer) {
        if (!answer) return;
        if (answer.ok && answer.body.again && answer.body.release === release) {
          try {
            showAgain(answer.body.again);
          } catch (error) {  // the editor would not take it: the page loads it anew
            window.location.assign(answer.body.next);
          }
        } else if (answer.ok) {
          window.location.assign(answer.body.next);
        } else {
          stopSaving(refused(answer.body));
        }
      })
      .catch(function () {
        stopSaving(["Your rating could not be sent: check your connection and submit again."]);
      });
  }

  function send(annotation) {
    if (sending) return;
    sending = true;
    listed = false;
    saving(true);
    post(JSON.stringify({
      assignment: boot.assignment, results: annotation.serializeAnnotation(), typing: typing,
      visible_seconds: visibleSeconds(),
    }));
  }

  function task() {
    return { id: boot.task.id, data: boot.task.data, annotations: [], predictions: [] };
  }

  function newAnnotation(store) {
    var annotation = store.annotationStore.addAnnotation({ userGenerate: true });
    store.annotationStore.selectAnnotation(annotation.id);
  }

  // The next episode, as the gateway chose it, in the editor already running (as Label
  // Studio's own app does between tasks): nothing is loaded or run again but the task.
  function showAgain(again) {
    boot = again.boot;
    document.getElementById("boot").textContent = JSON.stringify(boot);
    typing = {};
    countVisibleFrom(boot.assignment);
    watchVisible();
    editor.resetState();
    editor.assignTask(task());
    editor.initializeStore(task());
    newAnnotation(editor);
    document.querySelector(".study-progress").textContent =
      "Episode " + again.number + " of " + again.total;
    window.scrollTo(0, 0);
    var episode = root.querySelector(EPISODE);
    if (episode) episode.scrollTop = 0;
    sending = false;
    saving(false);
    document.dispatchEvent(new CustomEvent("sotopia:episode", { detail: again.number }));
  }

  window.loadLabelStudio().then(function (LabelStudio) {
    new LabelStudio(root, {
      config: boot.config,
      task: task(),
      // The form and its Submit button only: no annotation list, no other work, no navigation.
      interfaces: ["topbar", "controls"],
      settings: boot.settings,
      user: { id: 1, pk: 1, firstName: "Participant" },
      onLabelStudioLoad: function (LS) {
        editor = LS;
        newAnnotation(LS);
      },
      onSubmitAnnotation: function (LS, annotation) { send(annotation); },
      onUpdateAnnotation: function (LS, annotation) { send(annotation); },
    });
  }, function () {
    show(["The rating form could not be loaded: check your connection and reload the page."]);
  });
})();
