from alloclab.cli import main

main()
