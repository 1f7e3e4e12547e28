// anagrapheus view: keyboard moves between pins (j/k), to the divergence (d) and to the next unit (u).
(function(){
  var pins=Array.prototype.slice.call(document.querySelectorAll('.pin'));
  var units=Array.prototype.slice.call(document.querySelectorAll('section.unit'));
  function at(){var a=document.activeElement;var i=pins.indexOf(a);if(i>=0)return i;
    var y=window.scrollY;for(var j=0;j<pins.length;j++){if(pins[j].offsetTop>=y)return j-1;}return pins.length-1;}
  function go(el){if(el){el.focus();el.scrollIntoView({block:'center'});}}
  document.addEventListener('keydown',function(e){
    if(e.ctrlKey||e.metaKey||e.altKey)return;var i=at();
    if(e.key==='j'||e.key==='ArrowDown'&&e.target.classList.contains('pin')){go(pins[Math.min(i+1,pins.length-1)]);e.preventDefault();}
    else if(e.key==='k'||e.key==='ArrowUp'&&e.target.classList.contains('pin')){go(pins[Math.max(i-1,0)]);e.preventDefault();}
    else if(e.key==='d'){var d=document.querySelector('.pin.focus')||document.getElementById('divergence');go(d);}
    else if(e.key==='u'){var c=pins[Math.max(i,0)];var n=units[units.indexOf(c?c.closest('section.unit'):null)+1];
      if(n){go(n.querySelector('.pin')||n);}}
  });
  // What was asked, laid out when first opened: a large page keeps its fingerprints as data until then.
  document.addEventListener('toggle',function(e){
    var d=e.target;if(!d.matches||!d.matches('details.fp[data-fp]')||d.querySelector('table'))return;
    var t=document.createElement('table');var h=t.insertRow();
    ['field','digest','value (kept with keep_values)'].forEach(function(x){var th=document.createElement('th');th.textContent=x;h.appendChild(th);});
    JSON.parse(d.getAttribute('data-fp')).forEach(function(f){var r=t.insertRow();
      r.insertCell().textContent=f[0];var c=document.createElement('code');c.textContent=f[1];r.insertCell().appendChild(c);
      var v=r.insertCell();if(f[2]===null){v.className='dim';v.textContent='not kept';}
      else{var k=document.createElement('code');k.textContent=f[2];v.appendChild(k);}});
    d.appendChild(t);
  },true);
})();
