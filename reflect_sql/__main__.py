import sys

from reflect_sql.cli import main

sys.exit(main())
