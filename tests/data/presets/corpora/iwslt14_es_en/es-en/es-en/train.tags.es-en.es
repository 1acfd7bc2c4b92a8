<url>http://www.ted.com/talks/una_charla.html</url>
<keywords>talks, science</keywords>
<speaker>Ana Oradora</speaker>
<talkid>11</talkid>
<title>Ana Oradora: Una charla</title>
<description>Charla TED: una primera charla.</description>
Muchas gracias.
Quiero empezar con una pregunta.
El año pasado mostré estas dos diapositivas.
El hielo se ha reducido un cuarenta por ciento.
Se expande en invierno y se contrae en verano.
<url>http://www.ted.com/talks/otra_charla.html</url>
<keywords>talks, design</keywords>
<speaker>Bo Orador</speaker>
<talkid>12</talkid>
<title>Bo Orador: Otra charla</title>
<description>Charla TED: otra charla.</description>
Veamos un ejemplo.
Son como bloques de juguete.
Podemos moverlos con las manos.
Esta es una idea sencilla.
Gracias por escuchar.
