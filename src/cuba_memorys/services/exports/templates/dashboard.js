"use strict";
(function () {
  var data = JSON.parse(document.getElementById("recent-data").textContent);
  var input = document.getElementById("filter");
  var body = document.getElementById("hits");
  var note = document.getElementById("hit-count");
  var max = parseInt(input.getAttribute("data-max"), 10);
  function cell(row, text) { var td = document.createElement("td"); td.textContent = text; row.appendChild(td); }
  function show() {
    var q = input.value.trim().toLowerCase();
    var hits = data.filter(function (o) {
      return !q || (o.entity + " " + o.content + " " + o.type).toLowerCase().indexOf(q) >= 0;
    });
    body.textContent = "";
    hits.slice(0, max).forEach(function (o) {
      var tr = document.createElement("tr");
      cell(tr, o.date); cell(tr, o.entity); cell(tr, o.type); cell(tr, o.content);
      body.appendChild(tr);
    });
    note.textContent = hits.length + " match(es)" + (hits.length > max ? ", first " + max + " shown" : "");
  }
  input.addEventListener("input", show);
  show();
})();
