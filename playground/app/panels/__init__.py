"""The panels of the page, one module each: a view of the run on screen and its tab (`TAB`, a `playground.app.tab.Tab`:
its layout, its actions and its words' keys). Adding one is its module, its figure and its words in the locale files;
nothing else names it (the page finds it: `playground.app.tabs`)."""
