import sys

from sparktui.cli import main

sys.exit(main())
