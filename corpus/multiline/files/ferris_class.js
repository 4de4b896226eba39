// Adapted from the Rust book's ferris.js (MIT OR Apache-2.0): its functions as methods of a class.
class FerrisAttacher {
  constructor(types) {
    this.types = types;
  }

  attachAll() {
    for (var ferrisType of this.types) {
      this.attachFerrises(ferrisType);
    }
  }

  attachFerrises(type) {
    var elements = document.getElementsByClassName(type.attr);

    for (var codeBlock of elements) {
      var lines = codeBlock.textContent.split(/\r|\r\n|\n/).length - 1;

      if (lines >= 4) {
        this.attachFerris(codeBlock, type);
      }
    }
  }

  attachFerris(element, type) {
    var a = document.createElement('a');
    a.setAttribute('href', 'ch00-00-introduction.html#ferris');
    a.setAttribute('target', '_blank');

    var img = document.createElement('img');
    img.setAttribute('src', 'img/ferris/' + type.attr + '.svg');
    img.setAttribute('title', type.title);
    img.className = 'ferris';

    a.appendChild(img);

    element.parentElement.insertBefore(a, element);
  }
}
