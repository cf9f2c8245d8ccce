// kubectl applyset ui: the page's live updates, the diff fragment and the action forms.
// Plain JavaScript, loaded from /assets (the Content-Security-Policy allows no inline script,
// no inline style and no on*= attribute). Markup fetched here comes from the ui's own
// templates, which escape every tenant string; it is parsed with DOMParser, never assigned to
// innerHTML.
(function () {
  'use strict';

  var DEBOUNCE_MS = 250;

  function setStatus(className, text) {
    var status = document.getElementById('live-status');
    if (!status) {
      return;
    }
    status.className = className;
    status.textContent = text;
  }

  function parse(text) {
    return new DOMParser().parseFromString(text, 'text/html');
  }

  // Re-reads this page and swaps each [data-live] element for the one with the same id in
  // the fresh copy. One fetch at a time; changes that come meanwhile ask for one more.
  var timer = null;
  var busy = false;
  var again = false;

  function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    fetch(location.href, { credentials: 'same-origin', headers: { Accept: 'text/html' } })
      .then(function (response) {
        if (response.status === 404) {
          // The set is gone (or no longer visible): show the page that says so.
          location.reload();
          return null;
        }
        if (!response.ok) {
          throw new Error('HTTP ' + response.status);
        }
        return response.text();
      })
      .then(function (text) {
        if (text === null) {
          return;
        }
        var fresh = parse(text);
        document.querySelectorAll('[data-live]').forEach(function (old) {
          if (!old.id) {
            return;
          }
          var next = fresh.getElementById(old.id);
          if (next) {
            old.replaceWith(document.adoptNode(next));
          }
        });
        document.dispatchEvent(new CustomEvent('applyset:updated'));
      })
      .catch(function (error) {
        setStatus('live-error', 'update failed: ' + error.message);
      })
      .finally(function () {
        busy = false;
        if (again) {
          again = false;
          schedule();
        }
      });
  }

  // At most one refresh per DEBOUNCE_MS: a burst of changes makes one fetch, and a steady
  // stream of changes still refreshes the page (the timer is not pushed back).
  function schedule() {
    if (timer !== null) {
      return;
    }
    timer = setTimeout(function () {
      timer = null;
      refresh();
    }, DEBOUNCE_MS);
  }

  function listen() {
    var src = document.body.dataset.liveSrc;
    if (!src || !window.EventSource) {
      setStatus('live-off', 'not live');
      return;
    }
    var source = new EventSource(src);
    source.addEventListener('open', function () {
      setStatus('live-on', 'live');
    });
    source.addEventListener('error', function () {
      if (source.readyState === EventSource.CLOSED) {
        setStatus('live-off', 'disconnected: reload the page');
      } else {
        setStatus('live-connecting', 'reconnecting');
      }
    });
    source.addEventListener('changed', schedule);
    source.addEventListener('reload', function () {
      location.reload();
    });
  }

  // The set page's diff: computed only when asked (#diff-load clicked), fetched as a
  // fragment into #diff-body; the button is disabled while it is computed.
  function loadDiff(diff, button) {
    var body = diff.querySelector('#diff-body') || diff;
    var say = function (text) {
      var p = document.createElement('p');
      p.className = 'diff-unavailable';
      p.textContent = text;
      body.replaceChildren(p);
    };
    button.disabled = true;
    diff.classList.add('loading');
    fetch(diff.dataset.src, { credentials: 'same-origin', headers: { Accept: 'text/html' } })
      .then(function (response) {
        return response.text().then(function (text) {
          return { ok: response.ok, status: response.status, text: text };
        });
      })
      .then(function (answer) {
        var nodes = Array.from(parse(answer.text).body.childNodes).map(function (node) {
          return document.adoptNode(node);
        });
        if (!answer.ok && nodes.length === 0) {
          say('The diff could not be read (HTTP ' + answer.status + ').');
        } else {
          body.replaceChildren.apply(body, nodes);
        }
        diff.classList.add('loaded');
      })
      .catch(function (error) {
        say('The diff could not be read: ' + error.message);
      })
      .finally(function () {
        diff.classList.remove('loading');
        button.disabled = false;
      });
  }

  document.addEventListener('click', function (event) {
    var button = event.target instanceof Element ? event.target.closest('#diff-load') : null;
    var diff = button ? button.closest('#diff[data-src]') : null;
    if (diff) {
      loadDiff(diff, button);
    }
  });

  // The action forms (#actions): posted with fetch; the answer's text shown in
  // #action-result.
  function act(form) {
    var result = document.getElementById('action-result');
    if (result) {
      result.className = 'pending';
      result.textContent = 'working…';
    }
    fetch(form.action, {
      method: 'POST',
      credentials: 'same-origin',
      body: new URLSearchParams(new FormData(form))
    })
      .then(function (response) {
        return response.text().then(function (text) {
          var doc = parse(text);
          var said = doc.getElementById('message') || doc.body;
          return { ok: response.ok, text: (said.textContent || '').trim() };
        });
      })
      .then(function (answer) {
        if (result) {
          result.className = answer.ok ? 'ok' : 'refused';
          result.textContent = answer.text;
        }
      })
      .catch(function (error) {
        if (result) {
          result.className = 'refused';
          result.textContent = 'failed: ' + error.message;
        }
      });
  }

  document.addEventListener('submit', function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.closest('#actions')) {
      event.preventDefault();
      act(form);
    }
  });

  // The filter form is a plain GET form; a changed choice submits it.
  document.addEventListener('change', function (event) {
    var field = event.target;
    if (field instanceof HTMLSelectElement && field.form && field.form.id === 'filter') {
      field.form.requestSubmit();
    }
  });

  listen();
})();
