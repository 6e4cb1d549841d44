// Label Studio's editor from Label Studio's own web app (see serving/editor.py): this script runs
// after the app's webpack runtime and before the app's chunks. It lets the app's entry chunk
// register its modules, which the editor uses, without starting the app (whose start is the
// chunk's third element), and gives the rating page `loadLabelStudio`, which loads the editor's
// chunks through the runtime and resolves with the editor's class.
(function () {
  "use strict";
  var loader = JSON.parse(document.getElementById("editor-loader").textContent);
  var chunks = self[loader.chunkList] = self[loader.chunkList] || [];
  var register = chunks.push;
  chunks.push = function (chunk) {
    var entry = chunk[0].indexOf(loader.entry) >= 0;
    return register.call(chunks, entry ? [chunk[0], chunk[1]] : chunk);
  };
  window.loadLabelStudio = function () {
    return new Promise(function (resolve, reject) {
      // A chunk of no code whose third element the runtime calls with its `require`.
      chunks.push([["sotopia-editor"], {}, function (require) {
        Promise.all(loader.chunks.map(function (id) { return require.e(id); }))
          .then(function () {
            require(loader.module);
            resolve(window.LabelStudio);
          }, reject);
      }]);
    });
  };
})();
